"""The benchmark nets written in PyTorch 1.13 (no torchvision on Debian 12's python3-torch), with the same
architectures as joule's zoo: LeNet-5 (ReLU, max-pool), ResNet-18 and ResNet-50 (torchvision v1.5 layout), VGG-16
(configuration D, no BN), MobileNetV2 (torchvision's layout, width 1.0) and a BERT encoder."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or inp != planes:
            self.down = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1, self.bn1 = nn.Conv2d(inp, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or inp != out:
            self.down = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, blocks, block, expansion, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inp = [], 64
        for i, planes in enumerate([64, 128, 256, 512]):
            for b in range(blocks[i]):
                layers.append(block(inp, planes, 2 if (i > 0 and b == 0) else 1))
                inp = planes * expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inp, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def ResNet18(classes=1000):
    return ResNet([2, 2, 2, 2], BasicBlock, 1, classes)


def ResNet50(classes=1000):
    return ResNet([3, 4, 6, 3], Bottleneck, 4, classes)


class VGG16(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        layers, inp = [], 3
        for c in [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]:
            if c == 0:
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(inp, c, 3, 1, 1), nn.ReLU()]
                inp = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(4096, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def conv_bn_act(inp, out, k, stride, groups, act):
    layers = [nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(out)]
    return nn.Sequential(*(layers + [nn.ReLU6()] if act else layers))


class InvertedResidual(nn.Module):
    def __init__(self, inp, out, stride, t):
        super().__init__()
        hidden = inp * t
        layers = [conv_bn_act(inp, hidden, 1, 1, 1, True)] if t != 1 else []
        layers += [conv_bn_act(hidden, hidden, 3, stride, hidden, True), conv_bn_act(hidden, out, 1, 1, 1, False)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and inp == out

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        layers, inp = [conv_bn_act(3, 32, 3, 2, 1, True)], 32
        for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
            for i in range(n):
                layers.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        layers.append(conv_bn_act(inp, 1280, 1, 1, 1, True))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class Bert(nn.Module):
    """Post-norm BERT encoder with GELU, pooler on [CLS] and a classifier, as joule's zoo::build_bert."""

    def __init__(self, layers=2, hidden=128, heads=2, inter=512, vocab=30522, positions=512, classes=2, dropout=0.1):
        """Defaults: bert-tiny; BertBase() below is L=12 H=768 A=12."""
        super().__init__()
        self.word, self.pos, self.seg = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden), nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [nn.TransformerEncoderLayer(hidden, heads, inter, dropout, activation="gelu", batch_first=True, layer_norm_eps=1e-12) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.cls = nn.Linear(hidden, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
        x = self.drop(self.ln(self.word(ids) + self.pos(pos) + self.seg(torch.zeros_like(ids))))
        for layer in self.layers:
            x = layer(x)
        return self.cls(self.drop(torch.tanh(self.pooler(x[:, 0]))))


def BertBase():
    return Bert(layers=12, hidden=768, heads=12, inter=3072)
