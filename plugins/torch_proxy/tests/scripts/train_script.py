"""A plain PyTorch training script (nothing oarlock in it): a small CNN on a synthetic image set with a
DataLoader, BatchNorm, dropout off, SGD with momentum and a StepLR schedule, an eval pass under no_grad.

    python train_script.py OUT.json [--save-init INIT.npz | --load-init INIT.npz]

Run once with the real torch (saving the initial weights) and once through the torch proxy with
scope=None (loading them); the test compares the two JSON files."""

import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 3))

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.bn(self.conv(x)))))


def main():
    out_path, mode, init_path = sys.argv[1], sys.argv[2], sys.argv[3]
    rng = np.random.default_rng(0)
    images = torch.tensor(rng.standard_normal((24, 1, 8, 8)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, 3, 24))
    model = Net()
    if mode == "--save-init":
        np.savez(init_path, **{k: v.numpy() for k, v in model.state_dict().items()})
    else:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in np.load(init_path).items()})
    loader = DataLoader(TensorDataset(images, labels), batch_size=8, shuffle=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    losses = []
    for _epoch in range(3):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        logits = model(images)
        correct = (logits.argmax(dim=1) == labels).sum().item()
        values, indices = logits.max(1)
    json.dump({"losses": losses, "correct": correct, "max_values": values.tolist(),
               "running_var": model.bn.running_var.tolist(), "lr": scheduler.get_last_lr()[0],
               "torch": type(torch.ones(1)).__module__}, open(out_path, "w"))


if __name__ == "__main__":
    main()
