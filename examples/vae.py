"""The MNIST variational autoencoder: an MLP encoder producing a mean and a log
variance, the reparameterization trick, and an MLP decoder back to 784 pixels.

``forward`` flattens its input with ``x.view(-1, 784)`` and returns a tuple
(reconstruction, mu, logvar).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=8):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


__shapeinfer__ = {
    "model": "VAE()",
    "inputs": {"x": "float32[B, 1, 28, 28]"},
    "sizes": {"B": 4},
    "oracle_sizes": [{"B": 1}, {"B": 5}, {"B": 9}],
}


if __name__ == "__main__":
    model = VAE().eval()
    with torch.no_grad():
        recon, mu, logvar = model(torch.rand(4, 1, 28, 28))
    print("output:", tuple(recon.shape), tuple(mu.shape), tuple(logvar.shape))
