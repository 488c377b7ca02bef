// `joule report`: a self-contained HTML page of figures from a profile database (--db), a `joule train
// --json` run (--train) or a `joule analyze --json` sweep (--analyze).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "report/html_report.hpp"

namespace joule::cli {

void add_report(CLI::App& app) {
    struct Flags {
        std::string db, train, analyze, out = "joule-report.html";
        ProfilePrediction predicted;
    };
    auto f = std::make_shared<Flags>();
    auto* cmd = app.add_subcommand("report", "an HTML page of figures (inline SVG, nothing fetched) from a profile database, a train run's or an analyze sweep's JSON");
    auto* db = cmd->add_option("--db", f->db, "a joule profile database");
    auto* train = cmd->add_option("--train", f->train, "the output of joule train --json");
    auto* analyze = cmd->add_option("--analyze", f->analyze, "the output of joule analyze --json (a capacity or bandwidth sweep)");
    db->excludes(train), db->excludes(analyze), train->excludes(analyze);
    cmd->add_option("--out", f->out, "the HTML file to write")->capture_default_str();
    auto* predict = cmd->add_option("--predict", f->predicted.device,
                                    "with --db: predict each CPU configuration's step on this data/hw device (name, alias or path; the one this CPU "
                                    "was profiled on compares the cost interface with the measurement)");
    predict->needs(db);
    cmd->add_option("--image-size", f->predicted.image_size, "with --predict: the input size the sweep used (0: each net's default)")->check(number_in(0))->needs(predict);
    cmd->add_option("--seq-len", f->predicted.seq_len, "with --predict: the sequence length the sweep used for BERT nets")
        ->capture_default_str()
        ->check(number_in(1, 4096))
        ->needs(predict);
    cmd->callback([f] {
        if (f->db.empty() + f->train.empty() + f->analyze.empty() != 2)
            throw Error("joule report takes --db FILE, --train FILE or --analyze FILE", "e.g. joule report --db joule-profile.db --out report.html");
        HtmlReport r;
        auto read_json = [](const std::string& flag, const std::string& path) {
            std::ifstream in(path);
            if (!in) throw Error(flag + " " + path + ": cannot read the file");
            const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
            if (j.is_discarded()) throw Error(flag + " " + path + ": not JSON", "make it with the command's --json");
            return j;
        };
        if (!f->db.empty()) {
            if (!f->predicted.device.empty()) load_whole_net_device(f->predicted.device, "--predict");  // checked before the database is read
            const profile::Store store(f->db, profile::Store::Mode::ReadOnly);
            r = profile_report(store, f->predicted);
        } else if (!f->train.empty()) {
            r = train_report(read_json("--train", f->train), f->train);
        } else {
            r = analyze_report(read_json("--analyze", f->analyze), f->analyze);
        }
        std::ofstream out(f->out);
        if (!out) throw Error("--out " + f->out + ": cannot write the report");
        write_html(out, r);
        size_t figures = 0;
        for (const HtmlSection& s : r.sections) figures += s.figures.size();
        std::cout << "wrote " << f->out << ": " << r.sections.size() << " section(s), " << figures << " figure(s) from " << r.source << "\n";
    });
}

}  // namespace joule::cli
