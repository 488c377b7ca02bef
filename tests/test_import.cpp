// import/: models exported by PyTorch 1.13 (tests/pytorch_onnx_models.py, Debian's python3-torch) train
// in joule as in PyTorch -- one SGD-with-momentum step on a fixed batch gives the same loss and weights
// -- and every malformed or unsupported file is a clear error.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/cpu/cpu_backend.hpp"
#include "import/onnx.hpp"
#include "runtime/executor.hpp"
#include "runtime/step.hpp"
#include "test_util.hpp"

namespace joule {
namespace {

std::string export_dir() { return ::testing::TempDir() + "joule_onnx_" + std::to_string(getpid()); }
// The exports (a ResNet-18 is 47 MB) and the other files the tests write go when the process ends.
struct RemoveExports : ::testing::Environment {
    void TearDown() override {
        std::error_code ec;
        for (const std::string& d : {export_dir(), ::testing::TempDir() + "joule_onnx_ext_" + std::to_string(getpid()),
                                     ::testing::TempDir() + "joule_onnx_loss_" + std::to_string(getpid())})
            std::filesystem::remove_all(d, ec);
    }
};
[[maybe_unused]] const ::testing::Environment* const remove_exports = ::testing::AddGlobalTestEnvironment(new RemoveExports);

// The models the PyTorch script wrote (each generated once per test process, on first use).
std::string exported(const std::string& name) {
    const std::string dir = export_dir();
    const std::string path = dir + "/" + name + ".onnx";
    if (!std::filesystem::exists(path)) {
        const std::string cmd = "/usr/bin/python3 " JOULE_TESTS_DIR "/pytorch_onnx_models.py " + dir + " " + name + " 2>/dev/null";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << " (scripts/setup.sh installs python3-torch and python3-torchvision)";
    }
    return path;
}
nlohmann::json result_of(const std::string& name) {
    std::ifstream f(std::filesystem::path(exported(name)).replace_extension(".json"));
    return nlohmann::json::parse(f);
}

// ||got - want|| / ||want||, ||want|| taken as at least 1e-3 per element: the batch mean of zero-mean
// channels (a 1x1 convolution of BatchNorm's output) is float rounding noise of 1e-9 whose digits no two
// summation orders share, so values that small are compared to 1e-7 absolute.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
    double d = 0, n = 0;
    for (size_t i = 0; i < want.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
    return std::sqrt(d) / std::max(std::sqrt(n), 1e-3 * std::sqrt(double(want.size())));
}

// Fills the model's input from PyTorch's (NCHW) batch: image batches are stored nhwc in joule.
void feed(Executor& ex, const zoo::Model& m, const nlohmann::json& r) {
    const TensorDesc& d = ex.graph().tensor(m.input).desc;
    const std::vector<double> x = r["input"].get<std::vector<double>>();
    ASSERT_EQ(int64_t(x.size()), d.numel());
    if (d.dtype == DType::I32) {
        for (size_t i = 0; i < x.size(); ++i) ex.i32(m.input)[i] = int32_t(x[i]);
    } else if (d.layout == Layout::ChannelsLast) {
        const int64_t N = d.shape[0], C = d.shape[1], HW = d.shape[2] * d.shape[3];
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c)
                for (int64_t p = 0; p < HW; ++p) ex.f32(m.input)[(n * HW + p) * C + c] = float(x[size_t((n * C + c) * HW + p)]);
    } else {
        for (size_t i = 0; i < x.size(); ++i) ex.f32(m.input)[i] = float(x[i]);
    }
    const std::vector<int> y = r["labels"].get<std::vector<int>>();
    std::copy(y.begin(), y.end(), ex.i32(m.labels));
}

class OnnxEquivalence : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxEquivalence, OneSgdStepMatchesPyTorch) {
    const std::string name = GetParam();
    const nlohmann::json r = result_of(name);
    zoo::Model m = import_onnx(exported(name), {.batch = r["input_shape"][0].get<int64_t>()});
    const float lr = r["lr"], momentum = r["momentum"];
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(lr, momentum));
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu, {{m.logits, tg.loss}, 7});
    feed(ex, m, r);
    StepRunner runner(ex, tg, OptimizerConfig::sgd(lr, momentum), {});
    const StepResult s = runner.step([](int64_t) {});
    EXPECT_NEAR(s.loss, r["loss"].get<double>(), 1e-4 * std::abs(r["loss"].get<double>())) << name;
    size_t compared = 0;
    for (const auto& [w, values] : r["weights"].items()) {
        const std::optional<TensorId> t = tg.graph.find_tensor(w);
        ASSERT_TRUE(t) << name << ": no tensor " << w;
        EXPECT_LE(relative_error(ex.read_f32(*t), values.get<std::vector<double>>()), 1e-4) << name << ": " << w;
        ++compared;
    }
    // every parameter and running statistic PyTorch has (its state_dict's floating-point entries)
    const size_t norms = size_t(std::count_if(tg.graph.nodes().begin(), tg.graph.nodes().end(), [](const Node& n) { return n.kind == OpKind::BatchNorm2d; }));
    EXPECT_EQ(compared, tg.graph.tensors_with_role(TensorRole::Parameter).size() + 2 * norms);
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxEquivalence, ::testing::Values("residual_cnn", "depthwise", "broadcasting", "encoder_opset14", "encoder_opset17"),
                         [](const auto& info) { return std::string(info.param); });

TEST(OnnxImport, TorchvisionResNet18HasTheZoosParameterCount) {
    const nlohmann::json r = result_of("resnet18");
    const zoo::Model m = import_onnx(exported("resnet18"));
    zoo::NetConfig cfg;
    cfg.batch = 2;
    EXPECT_EQ(m.graph.parameter_count(), r["parameters"].get<int64_t>());
    EXPECT_EQ(m.graph.parameter_count(), zoo::build("resnet18", cfg).graph.parameter_count());
}

TEST(OnnxImport, ImagesChangeLayoutOnceAtTheFlatten) {
    for (const char* name : {"residual_cnn", "depthwise", "resnet18"}) {
        const std::string path = exported(name);
        const zoo::Model m = import_onnx(path, {.batch = onnx_fixed_batch(path) ? 0 : 2});
        int conversions = 0, transposes = 0;
        for (const Node& n : m.graph.nodes()) {
            transposes += n.kind == OpKind::Transpose;
            if (n.kind == OpKind::Reshape && m.graph.tensor(n.inputs[0]).desc.layout != m.graph.tensor(n.outputs[0]).desc.layout) ++conversions;
        }
        EXPECT_EQ(m.graph.tensor(m.input).desc.layout, Layout::ChannelsLast) << name;
        EXPECT_EQ(conversions, 1) << name;
        EXPECT_EQ(transposes, 0) << name;
    }
}

TEST(OnnxImport, ASymbolicBatchTakesTheGivenOne) {
    const std::string path = exported("residual_cnn");  // exported with dynamic_axes on the batch
    EXPECT_EQ(onnx_fixed_batch(path), 0);
    const zoo::Model m = import_onnx(path, {.batch = 6});
    EXPECT_EQ(m.graph.tensor(m.input).desc.shape, (Shape{6, 3, 16, 16}));
    EXPECT_EQ(m.graph.tensor(m.labels).desc.shape, (Shape{6}));
    test::expect_error([&] { import_onnx(path); }, "give it with --batch N");
    const std::string fixed = exported("depthwise");  // exported at batch 4
    EXPECT_EQ(onnx_fixed_batch(fixed), 4);
    test::expect_error([&] { import_onnx(fixed, {.batch = 8}); }, "dimension 0 fixes the batch at 4, not 8");
}

// The model in `path`, changed by `edit`, as bytes.
std::string edited(const std::string& path, const std::function<void(onnx::ModelProto&)>& edit) {
    std::ifstream f(path, std::ios::binary);
    onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromIstream(&f));
    edit(m);
    return m.SerializeAsString();
}

TEST(OnnxImport, MalformedOrUnsupportedModelsAreClearErrors) {
    const std::string cnn = exported("residual_cnn");
    std::ifstream f(cnn, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    const OnnxImportOptions b4{.batch = 4};
    test::expect_error([&] { import_onnx("/nonexistent/model.onnx"); }, "cannot open model file /nonexistent/model.onnx");
    test::expect_error([&] { import_onnx_bytes("", "m.onnx"); }, "m.onnx is empty");
    test::expect_error([&] { import_onnx_bytes("name: lenet5\nlayers: [conv]\n", "m.onnx"); }, "is not an ONNX model");
    test::expect_error([&] { import_onnx_bytes(bytes.substr(0, bytes.size() / 2), "half.onnx", b4); }, "half.onnx");
    test::expect_error([&] { import_onnx_bytes(edited(cnn, [](auto& m) { m.mutable_opset_import(0)->set_version(18); }), "m.onnx", b4); },
                       "opset 18 of the default domain; joule reads opsets 11-17");
    test::expect_error([&] {
        import_onnx_bytes(edited(cnn, [](auto& m) {
                              for (auto& n : *m.mutable_graph()->mutable_node())
                                  if (n.op_type() == "Relu") n.set_op_type("Elu");
                          }),
                          "m.onnx", b4);
    }, "node '/Relu' (Elu, opset 13): joule has no op for ONNX Elu");
    test::expect_error([&] {
        import_onnx_bytes(edited(cnn, [](auto& m) { m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(2)->set_dim_param("height"); }),
                          "m.onnx", b4);
    }, "input 'x' dimension 2 ('height') has no fixed size");
    test::expect_error([&] {
        import_onnx_bytes(edited(cnn, [](auto& m) {
                              auto* t = m.mutable_graph()->mutable_initializer(0);
                              t->clear_raw_data();
                              t->set_data_location(onnx::TensorProto::EXTERNAL);
                              auto* kv = t->add_external_data();
                              kv->set_key("location"), kv->set_value("weights.bin");
                          }),
                          "m.onnx", b4);
    }, "data is in an external file");
    // external data is read beside the file; a missing one is named
    const std::string dir = ::testing::TempDir() + "joule_onnx_ext_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/m.onnx", std::ios::binary) << edited(cnn, [](auto& m) {
        auto* t = m.mutable_graph()->mutable_initializer(0);
        t->clear_raw_data();
        t->set_data_location(onnx::TensorProto::EXTERNAL);
        auto* kv = t->add_external_data();
        kv->set_key("location"), kv->set_value("weights.bin");
    });
    test::expect_error([&] { import_onnx(dir + "/m.onnx", b4); }, "its external data file " + dir + "/weights.bin is missing");
    test::expect_error([&] {
        import_onnx_bytes(edited(cnn, [](auto& m) { m.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(10); }), "m.onnx", b4);
    }, "a truncated file?");
    test::expect_error([&] { import_onnx(cnn, {.batch = 4, .labels = "y"}); }, "no graph input is named 'y'");
    test::expect_error([&] {
        import_onnx_bytes(edited(cnn, [](auto& m) { *m.mutable_graph()->add_input() = m.graph().input(0), m.mutable_graph()->mutable_input(1)->set_name("x2"); }),
                          "m.onnx", b4);
    }, "joule trains a model with one data input, this one has 2 (x, x2) (name the labels input with --labels)");
}

// Structure-aware mangling beside the byte-level fuzzer (fuzz/onnx.cpp, whose mutations mostly stop at
// protobuf's parser): every node of real exports with an input dropped, its inputs swapped, its op type
// replaced, its list attributes emptied or set to odd values, an initializer's dims changed. Each import
// either succeeds (and differentiates) or is a joule::Error; nothing else may escape.
TEST(OnnxImport, MangledNodesAreErrorsNotCrashes) {
    const char* types[] = {"Conv", "Gemm", "MatMul", "Reshape", "Gather", "Slice", "Pad", "Concat", "BatchNormalization", "ReduceMean",
                           "Expand", "Pow", "Softmax", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "MaxPool", "Where", "Range", "Constant"};
    const std::vector<std::vector<int64_t>> odd = {{}, {0}, {-1, 5, 7}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {int64_t(1) << 40}};
    int imported = 0, errors = 0;
    auto attempt = [&](const std::string& bytes) {
        try {
            zoo::Model m = import_onnx_bytes(bytes, "mangled.onnx", {.batch = 4});
            build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
            ++imported;
        } catch (const Error&) {
            ++errors;
        }
    };
    for (const char* name : {"residual_cnn", "broadcasting", "encoder_opset14", "encoder_opset17"}) {
        std::ifstream f(exported(name), std::ios::binary);
        onnx::ModelProto base;
        ASSERT_TRUE(base.ParseFromIstream(&f));
        for (int i = 0; i < base.graph().node_size(); ++i) {
            auto mangle = [&](const std::function<void(onnx::NodeProto&)>& edit) {
                onnx::ModelProto m = base;
                edit(*m.mutable_graph()->mutable_node(i));
                attempt(m.SerializeAsString());
            };
            mangle([](onnx::NodeProto& n) { if (n.input_size()) n.mutable_input()->RemoveLast(); });
            mangle([](onnx::NodeProto& n) { n.clear_input(); });
            mangle([](onnx::NodeProto& n) { n.clear_output(); });
            mangle([](onnx::NodeProto& n) { if (n.input_size() > 1) n.mutable_input()->SwapElements(0, 1); });
            for (const char* t : types) mangle([t](onnx::NodeProto& n) { n.set_op_type(t); });
            for (int a = 0; a < base.graph().node(i).attribute_size(); ++a)
                for (const auto& v : odd)
                    mangle([a, &v](onnx::NodeProto& n) {
                        auto* at = n.mutable_attribute(a);
                        at->clear_ints(), at->set_i(v.empty() ? 0 : v[0]), at->set_f(v.empty() ? 0.0f : float(v[0]));
                        for (int64_t x : v) at->add_ints(x);
                    });
        }
        for (int k = 0; k < base.graph().initializer_size(); ++k)
            for (const auto& v : odd) {
                onnx::ModelProto m = base;
                auto* t = m.mutable_graph()->mutable_initializer(k);
                t->clear_dims();
                for (int64_t d : v) t->add_dims(d);
                attempt(m.SerializeAsString());
            }
    }
    EXPECT_GT(errors, 1000);
    EXPECT_GT(imported, 10);  // some mangles are harmless (an attribute at its default), and import
}

// Gemm with transA (A given as [features, batch]): Y = A^T W^T + b, checked element by element.
TEST(OnnxImport, GemmTransposesA) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    auto* x = g->add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {3, 2}) x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    auto init = [&](const char* name, Shape dims, std::vector<float> v) {
        auto* t = g->add_initializer();
        t->set_name(name), t->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) t->add_dims(d);
        for (float f : v) t->add_float_data(f);
    };
    init("w", {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    init("b", {4}, {0.5f, -0.5f, 1, -1});
    auto* n = g->add_node();
    n->set_op_type("Gemm"), n->set_name("fc");
    for (const char* s : {"x", "w", "b"}) n->add_input(s);
    n->add_output("y");
    for (const char* a : {"transA", "transB"}) {
        auto* at = n->add_attribute();
        at->set_name(a), at->set_type(onnx::AttributeProto::INT), at->set_i(1);
    }
    g->add_output()->set_name("y");
    zoo::Model model = import_onnx_bytes(m.SerializeAsString(), "gemm.onnx");
    ASSERT_EQ(model.graph.tensor(model.logits).desc.shape, (Shape{2, 4}));
    TrainGraph tg = build_train_graph(std::move(model.graph), model.loss, OptimizerConfig::sgd(0.1f, 0.0f));
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu, {{model.logits, tg.loss}, 7});
    const float a[6] = {1, -1, 2, 0.5f, -3, 4};  // A [3, 2]
    std::copy(a, a + 6, ex.f32(model.input));
    ex.run_forward({});
    const std::vector<float> y = ex.read_f32(model.logits);
    const float w[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b[4] = {0.5f, -0.5f, 1, -1};
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 4; ++c) {
            float want = b[c];
            for (int k = 0; k < 3; ++k) want += a[k * 2 + r] * w[c * 3 + k];
            EXPECT_FLOAT_EQ(y[size_t(r * 4 + c)], want) << r << "," << c;
        }
}

TEST(OnnxImport, ModelsWithTheirOwnLossKeepIt) {
    // the encoder with nn.CrossEntropyLoss exported inside it: labels are the loss's input
    const std::string dir = ::testing::TempDir() + "joule_onnx_loss_" + std::to_string(getpid());
    const std::string py = R"(
import sys, torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.fc = nn.Linear(8, 3)
    def forward(s, x, y):
        return F.cross_entropy(s.fc(x), y)
torch.onnx.export(M(), (torch.randn(4, 8), torch.tensor([0, 1, 2, 0])), sys.argv[1], opset_version=13, input_names=["x", "y"],
                  training=torch.onnx.TrainingMode.TRAINING)
)";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/m.py") << py;
    ASSERT_EQ(std::system(("/usr/bin/python3 " + dir + "/m.py " + dir + "/loss.onnx 2>/dev/null").c_str()), 0);
    const zoo::Model m = import_onnx(dir + "/loss.onnx");
    EXPECT_EQ(m.graph.tensor(m.labels).name, "y");
    EXPECT_EQ(m.graph.tensor(m.labels).role, TensorRole::Label);
    EXPECT_EQ(m.graph.node(m.graph.tensor(m.loss).producer).kind, OpKind::SoftmaxCrossEntropy);
    EXPECT_EQ(m.graph.tensor(m.logits).desc.shape, (Shape{4, 3}));
}

// Trains a model a few steps, exports it, imports the export: both give the same logits, in training
// mode (BatchNorm's batch statistics) and in evaluation mode (its running statistics, which PyTorch-side
// tools use).
class OnnxExport : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxExport, ImportOfTheExportGivesTheSameOutputs) {
    const std::string name = GetParam();
    const nlohmann::json r = result_of(name);
    const int64_t batch = r["input_shape"][0];
    zoo::Model m = import_onnx(exported(name), {.batch = batch});
    const OptimizerConfig opt = OptimizerConfig::sgd(0.05f, 0.9f);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, opt);
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu, {{m.logits, tg.loss}, 7});
    feed(ex, m, r);
    StepRunner runner(ex, tg, opt, {});
    for (int k = 0; k < 3; ++k) runner.step([](int64_t) {});
    const std::string path = export_dir() + "/export_" + name + ".onnx";
    export_onnx(tg.graph, m.input, m.logits, [&](TensorId t) { return ex.read_f32(t); }, path);

    zoo::Model back = import_onnx(path);
    EXPECT_EQ(back.graph.parameter_count(), tg.graph.parameter_count());
    EXPECT_EQ(back.graph.tensor(back.input).desc, tg.graph.tensor(m.input).desc);
    TrainGraph tg2 = build_train_graph(std::move(back.graph), back.loss, opt);
    Executor ex2(tg2.graph, cpu, {{back.logits, tg2.loss}, 7});
    for (bool training : {true, false}) {
        feed(ex, m, r);
        feed(ex2, back, r);
        ex.run_forward({.training = training});
        ex2.run_forward({.training = training});
        EXPECT_EQ(ex.read_f32(m.logits), ex2.read_f32(back.logits)) << name << (training ? " training" : " evaluation");
    }
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxExport, ::testing::Values("residual_cnn", "depthwise", "broadcasting", "encoder_opset14"),
                         [](const auto& info) { return std::string(info.param); });

TEST(OnnxImport, TrainAndInspectTakeAModelFile) {
    const std::string cnn = exported("residual_cnn"), enc = exported("encoder_opset17");
    const test::CommandResult t = test::run_command(std::string(JOULE_BINARY) + " train --model " + cnn + " --dataset synthetic --steps 3 --batch 8 --quiet --json 2>&1");
    ASSERT_EQ(t.code, 0) << t.out;
    const nlohmann::json j = nlohmann::json::parse(t.out);
    EXPECT_EQ(j["net"], "residual_cnn");
    EXPECT_EQ(j["batch"], 8);
    const std::string saved = export_dir() + "/saved.onnx";
    const test::CommandResult e =
        test::run_command(std::string(JOULE_BINARY) + " train --model " + enc + " --dataset synthetic --steps 2 --quiet --save " + saved + " 2>&1");
    EXPECT_EQ(e.code, 0) << e.out;  // the file's fixed batch (4)
    EXPECT_EQ(import_onnx(saved).graph.parameter_count(), import_onnx(enc).graph.parameter_count());
    const test::CommandResult z = test::run_command(std::string(JOULE_BINARY) + " train --net lenet5 --dataset synthetic --steps 1 --batch 4 --quiet --save " + saved + " 2>&1");
    EXPECT_EQ(z.code, 0) << z.out;  // a zoo net exports too
    EXPECT_EQ(import_onnx(saved).graph.parameter_count(), test::zoo_train_graph("lenet5", 4).graph.parameter_count());
    size_t relus = 0;  // training ran them fused into their producers; the file has them as nodes again
    const Graph exported_lenet = import_onnx(saved).graph;
    for (const Node& n : exported_lenet.nodes()) relus += n.kind == OpKind::Relu;
    EXPECT_EQ(relus, 4u);
    const test::CommandResult nodir = test::run_command(std::string(JOULE_BINARY) + " train --model " + cnn + " --dataset synthetic --batch 4 --save /nonexistent/m.onnx 2>&1");
    EXPECT_NE(nodir.code, 0);
    EXPECT_NE(nodir.out.find("joule: error: --save /nonexistent/m.onnx: directory /nonexistent does not exist"), std::string::npos) << nodir.out;
    const test::CommandResult i = test::run_command(std::string(JOULE_BINARY) + " inspect --model " + enc + " 2>&1");
    EXPECT_EQ(i.code, 0) << i.out;
    EXPECT_NE(i.out.find("layers.1.ff1"), std::string::npos);
    const test::CommandResult bad = test::run_command(std::string(JOULE_BINARY) + " inspect --model " + JOULE_TESTS_DIR "/test_import.cpp 2>&1");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("joule: error: "), std::string::npos) << bad.out;
    const test::CommandResult both = test::run_command(std::string(JOULE_BINARY) + " train --net lenet5 --model " + cnn + " 2>&1");
    EXPECT_NE(both.code, 0);
    EXPECT_NE(both.out.find("excludes"), std::string::npos) << both.out;
    const test::CommandResult none = test::run_command(std::string(JOULE_BINARY) + " inspect 2>&1");
    EXPECT_NE(none.out.find("a net is required"), std::string::npos) << none.out;
    const std::string db = export_dir() + "/profile.db";
    const test::CommandResult p = test::run_command(std::string(JOULE_BINARY) + " profile --model " + cnn + " --batch 4 --iters 1 --warmup 1 --meter modelled --device-spec cpu-amd-epyc-turin-2vcpu --db " + db + " 2>&1");
    EXPECT_EQ(p.code, 0) << p.out;
    const test::CommandResult pr = test::run_command(std::string(JOULE_BINARY) + " profile --report --db " + db + " --device v100 2>&1");
    EXPECT_EQ(pr.code, 0) << pr.out;
    EXPECT_NE(pr.out.find("residual_cnn.onnx"), std::string::npos) << pr.out;  // records keyed by the file, rebuilt from it for the model
    const test::CommandResult an = test::run_command(std::string(JOULE_BINARY) + " analyze --model " + enc + " --device v100 --json 2>&1");
    EXPECT_EQ(an.code, 0) << an.out;
    const test::CommandResult mlp = test::run_command(std::string(JOULE_BINARY) + " train --model " + exported("mlp") + " --steps 30 --eval-samples 500 --quiet --json 2>&1");
    ASSERT_EQ(mlp.code, 0) << mlp.out;  // flattened images: Fashion-MNIST's 784 values per sample
    EXPECT_GT(nlohmann::json::parse(mlp.out)["test_accuracy"].get<double>(), 0.5);
    const test::CommandResult data = test::run_command(std::string(JOULE_BINARY) + " train --model " + cnn + " --steps 1 2>&1");
    EXPECT_NE(data.out.find("the model takes"), std::string::npos) << data.out;  // Fashion-MNIST is 1x28x28, the model 3x16x16
}

}  // namespace
}  // namespace joule
