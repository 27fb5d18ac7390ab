"""A sequence classifier: token embeddings, one LSTM layer, its last step's hidden state to a classifier,
cross-entropy on integer labels (a sentiment model's shape).

The CPU default is hidden 128 on 32 tokens; `conf/model/lstm.yaml` gives a GPU hidden 512 on 128 tokens.
torch.compile does not trace nn.LSTM (Dynamo's allow_rnn is off by default), and as the break is inside the
model it falls back to eager for the whole model: all it compiles is the indexing of the LSTM's output and, in a
gradient, the loss. A run's `<op>_compiles` says so: 1 graph for inference, 2 for grad and training.
"""
from models import LSTM, Dense, Embed, Labels, ModelSpec, Token, Tokens


def build(vocab: int = 1000, length: int = 32, embed: int = 64, hidden: int = 128, classes: int = 2):
    layers = (Embed(vocab, embed), LSTM(embed, hidden), Token(-1), Dense(hidden, classes))
    sizes = {"inference": (2, 8, 32), "training": (8, 32), "grad": (8, 32)}
    return ModelSpec(name="lstm", layers=layers, input=Tokens(length, vocab), target=Labels(classes),
                     loss="cross_entropy", batch_sizes=sizes)
