"""PyTorch side of tests/test_import.cpp: exports small models as ONNX (training mode, so BatchNorm keeps its
training form) and runs one SGD-with-momentum step on a fixed batch, writing what joule must reproduce.

usage: /usr/bin/python3 pytorch_onnx_models.py OUTDIR [NAME ...]

For each model NAME it writes OUTDIR/NAME.onnx and OUTDIR/NAME.json: the batch (inputs NCHW, flat; labels),
the loss before the step, and every parameter and BatchNorm running statistic after it, under the names
the ONNX initializers carry (the model's state_dict names).
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

LR, MOMENTUM = 0.1, 0.9


class ResidualCNN(nn.Module):
    """Convolutions with BatchNorm, a residual block, max pooling, a strided convolution, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(16)
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(y)) + x)
        x = F.max_pool2d(x, 2)
        x = F.relu(self.down(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class DepthwiseNet(nn.Module):
    """MobileNetV2's pieces: depthwise 3x3 convolutions, ReLU6, an inverted residual, average pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                                nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24))
        self.block = nn.Sequential(nn.Conv2d(24, 48, 1, bias=False), nn.BatchNorm2d(48), nn.ReLU6(),
                                   nn.Conv2d(48, 48, 3, padding=1, groups=48, bias=False), nn.BatchNorm2d(48), nn.ReLU6(),
                                   nn.Conv2d(48, 24, 1, bias=False), nn.BatchNorm2d(24))
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(24 * 4 * 4, 10)

    def forward(self, x):
        x = self.dw(self.stem(x))
        x = x + self.block(x)
        return self.fc(torch.flatten(self.pool(x), 1))


class Encoder(nn.Module):
    """A small transformer encoder: token and position embeddings, two post-norm layers of multi-head
    self-attention and a GELU feed-forward, the first token's state to a classifier."""

    def __init__(self, batch, seq, vocab=100, hidden=32, heads=4, layers=2, classes=5):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.register_buffer("position_ids", torch.arange(seq).expand(batch, seq).contiguous())
        self.ln0 = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict({
                "q": nn.Linear(hidden, hidden), "k": nn.Linear(hidden, hidden), "v": nn.Linear(hidden, hidden),
                "o": nn.Linear(hidden, hidden), "ln1": nn.LayerNorm(hidden),
                "ff1": nn.Linear(hidden, 4 * hidden), "ff2": nn.Linear(4 * hidden, hidden), "ln2": nn.LayerNorm(hidden)}))
        self.cls = nn.Linear(hidden, classes)

    def forward(self, ids):
        b, s = ids.shape
        x = self.ln0(self.tok(ids) + self.pos(self.position_ids))
        h = x.shape[-1]
        d = h // self.heads
        for l in self.layers:
            def split(t):
                return t.view(b, s, self.heads, d).transpose(1, 2)
            q, k, v = split(l["q"](x)), split(l["k"](x)), split(l["v"](x))
            att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
            x = l["ln1"](x + l["o"](ctx))
            x = l["ln2"](x + l["ff2"](F.gelu(l["ff1"](x))))
        return self.cls(x[:, 0])


class Broadcasting(nn.Module):
    """Element-wise arithmetic joule imports op for op: a squeeze-and-excitation gate (ReduceMean over H and W,
    a broadcast Mul), a learned position table added across the batch, a mean subtracted, an RMS
    normalisation (Pow, ReduceMean, Add of a constant, Sqrt, Div, a broadcast weight), a clamp, ReduceSum and Neg."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.se1 = nn.Conv2d(8, 4, 1)
        self.se2 = nn.Conv2d(4, 8, 1)
        self.pos = nn.Parameter(torch.randn(1, 16, 8) * 0.1)
        self.scale = nn.Parameter(torch.rand(8) + 0.5)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = F.relu(self.conv(x))
        y = y * torch.sigmoid(self.se2(F.relu(self.se1(y.mean((2, 3), keepdim=True)))))
        t = y.flatten(2).transpose(1, 2) + self.pos
        t = t - t.mean(-1, keepdim=True)
        t = torch.clamp(t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale, -1.5, 1.5)
        return self.fc(-t.sum(1))


def models():
    torch.manual_seed(0)
    yield "residual_cnn", ResidualCNN(), torch.randn(4, 3, 16, 16), 10, 13, True
    yield "depthwise", DepthwiseNet(), torch.randn(4, 3, 16, 16), 10, 11, False
    yield "broadcasting", Broadcasting(), torch.randn(4, 3, 8, 8), 10, 13, False
    for opset in (14, 17):  # LayerNorm spelled out in ReduceMean/Sub/Pow/Sqrt/Div below 17, one node from 17
        torch.manual_seed(1)
        yield "encoder_opset%d" % opset, Encoder(4, 12), torch.randint(0, 100, (4, 12)), 5, opset, False


def export_torchvision_resnet18(out, batch=2, size=64):
    """torchvision's ResNet-18 as a user would export it (no training step: joule compares its size)."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18().train()
    torch.onnx.export(model, (torch.randn(batch, 3, size, size),), os.path.join(out, "resnet18.onnx"),
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=13,
                      input_names=["x"], output_names=["logits"])
    with open(os.path.join(out, "resnet18.json"), "w") as f:
        json.dump({"parameters": sum(p.numel() for p in model.parameters())}, f)


def export_mlp(out):
    """A multilayer perceptron of flattened 28x28 images, exported at a symbolic batch (joule trains it on
    Fashion-MNIST)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    torch.onnx.export(model, (torch.randn(2, 784),), os.path.join(out, "mlp.onnx"), opset_version=13, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    with open(os.path.join(out, "mlp.json"), "w") as f:
        json.dump({}, f)


def main():
    out = sys.argv[1]
    only = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)
    if not only or "resnet18" in only:
        export_torchvision_resnet18(out)
    if not only or "mlp" in only:
        export_mlp(out)
    for name, model, x, classes, opset, dynamic_batch in models():
        if only and name not in only:
            continue
        model.train()
        labels = torch.randint(0, classes, (x.shape[0],), generator=torch.Generator().manual_seed(3))
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(model, (x,), path, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=opset, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}} if dynamic_batch else None)
        # tracing ran the model once, which moved BatchNorm's running statistics: the file holds the moved ones,
        # and the step below starts from them as joule does
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        result = {"input": x.flatten().tolist(), "input_shape": list(x.shape), "labels": labels.tolist(), "loss": loss.item(),
                  "lr": LR, "momentum": MOMENTUM, "opset": opset,
                  "weights": {k: v.detach().flatten().tolist() for k, v in model.state_dict().items() if v.is_floating_point()}}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
