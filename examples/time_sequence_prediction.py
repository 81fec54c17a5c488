"""Sine-wave sequence prediction with two stacked LSTM cells, stepped by hand.

``forward`` creates the hidden and cell states from the batch size, walks the
input one time step at a time (``input.split(1, dim=1)``), optionally keeps
predicting ``future`` extra steps from its own output, and concatenates the
per-step outputs along the time dimension. The model runs in double precision.
"""

import torch
import torch.nn as nn


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs.append(output)
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs.append(output)
        outputs = torch.cat(outputs, dim=1)
        return outputs


__shapeinfer__ = {
    "model": "Sequence().double()",
    "inputs": {"input": "float64[B, T]"},
    "sizes": {"B": 3, "T": 10},
    "oracle_sizes": [{"B": 2, "T": 5}, {"B": 4, "T": 8}, {"B": 1, "T": 13}],
}


if __name__ == "__main__":
    model = Sequence().double().eval()
    with torch.no_grad():
        steps = torch.sin(torch.arange(3 * 20, dtype=torch.double).view(3, 20) / 4)
        out = model(steps)
        pred = model(steps, future=5)
    print("output:", tuple(out.shape), "with 5 future steps:", tuple(pred.shape))
