"""The causal language model: causal, blind to padding, one tied embedding table, the expected parameters; packed rows.

By hand: changing token 5 of a sequence leaves the logits of tokens 0 to 4 unchanged (causal); ``width=30`` with
``heads=4`` is refused (30 is no multiple of 4).
"""
import numpy as np
import mindspore as ms
import pytest

from data.packing import NO_DOCUMENT, first_fit, pack_rows
from data.tokens import PAD, pad_batch, random_sequences
from models.transformer import CausalLM, TokenLoss, document_mask, document_positions

VOCAB, WIDTH, DEPTH, MAX_LENGTH = 100, 64, 2, 256


@pytest.fixture(scope="module")
def net():
    ms.set_seed(0)
    return CausalLM(VOCAB, width=WIDTH, depth=DEPTH, heads=4, max_length=MAX_LENGTH)


def logits(net, tokens):
    return net(ms.Tensor(np.asarray(tokens, np.int32))).asnumpy()


def test_a_later_token_does_not_change_earlier_logits(net):
    tokens = np.array([[5, 17, 42, 8, 9, 31]], np.int32)
    changed = tokens.copy()
    changed[0, 4] = 77
    before, after = logits(net, tokens), logits(net, changed)
    np.testing.assert_allclose(after[:, :4], before[:, :4], rtol=1e-6, atol=1e-6)
    assert np.abs(after[:, 4:] - before[:, 4:]).max() > 1e-3


def test_logits_do_not_depend_on_the_padding_after_a_sequence(net):
    sequence = [5, 17, 42, 8, 9]
    short, long = logits(net, [sequence + [PAD] * 3]), logits(net, [sequence + [PAD] * 11])
    np.testing.assert_allclose(long[:, :5], short[:, :5], rtol=1e-5, atol=1e-5)


def test_pad_keys_get_no_attention():
    # A PAD before a real token: if attention saw it, changing what the PAD embeds would change later logits.
    ms.set_seed(2)
    net = CausalLM(VOCAB, width=WIDTH, depth=1, heads=4)
    tokens = [[5, PAD, 42]]
    before = logits(net, tokens)
    table = net.embedding.embedding_table
    changed = table.asnumpy()
    changed[PAD] += np.random.default_rng(0).normal(size=WIDTH).astype(np.float32)
    table.set_data(ms.Tensor(changed))
    after = logits(net, tokens)
    np.testing.assert_allclose(after[:, 2, 1:], before[:, 2, 1:], rtol=1e-5, atol=1e-5)   # column 0 is PAD's tied row
    assert np.abs(after[:, 1] - before[:, 1]).max() > 1e-3     # the PAD position itself did change


def test_the_output_layer_is_the_input_embedding(net):
    tables = [p for p in net.trainable_params() if p.shape == (VOCAB, WIDTH)]
    assert len(tables) == 1
    tokens = ms.Tensor(np.array([[5, 17, 42]], np.int32))
    grad = ms.grad(lambda t: net(t)[0, -1, 3], None, tables)(tokens)[0].asnumpy()
    assert np.abs(grad[3]).max() > 0           # output row 3 (a token not in the input): the tied use
    assert np.abs(grad[5]).max() > 0           # input row 5: the embedding use


def test_parameter_count(net):
    block = 2 * 2 * WIDTH + (WIDTH * 3 * WIDTH + 3 * WIDTH) + (WIDTH * WIDTH + WIDTH) \
        + (WIDTH * 4 * WIDTH + 4 * WIDTH) + (4 * WIDTH * WIDTH + WIDTH)
    expected = VOCAB * WIDTH + MAX_LENGTH * WIDTH + DEPTH * block + 2 * WIDTH
    assert sum(int(np.prod(p.shape)) for p in net.trainable_params()) == expected


def test_token_loss_sums_over_non_pad_targets(net):
    inputs, targets = pad_batch([[3, 4, 5, 6], [7, 8]], multiple=8)
    loss_sum, count = TokenLoss(net)(ms.Tensor(inputs), ms.Tensor(targets))
    log_probs = logits(net, inputs)
    log_probs = log_probs - np.log(np.exp(log_probs - log_probs.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - log_probs.max(-1, keepdims=True)
    expected = -sum(log_probs[b, t, targets[b, t]] for b in range(2) for t in range(8) if targets[b, t] != PAD)
    assert float(count) == 4.0
    np.testing.assert_allclose(float(loss_sum), expected, rtol=1e-5)


@pytest.mark.parametrize("kwargs, message", [({"width": 30, "heads": 4}, "width=30 and heads=4"),
                                             ({"dropout": 1.0}, "dropout must be in"),
                                             ({"depth": 0}, "depth must be")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CausalLM(VOCAB, **kwargs)


# Packed rows (data.packing): each document computes what it computes alone.

def packed_documents(seed=4):
    sequences = random_sequences(12, VOCAB, min_length=3, max_length=20, seed=seed)
    inputs, _ = pack_rows(sequences, 32)
    return sequences, inputs, first_fit([len(s) - 1 for s in sequences], 32)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_each_documents_logits_in_a_packed_row_are_its_logits_alone(net, mode):
    sequences, inputs, rows = packed_documents()
    assert max(len(row) for row in rows) >= 3          # rows really hold several documents
    call = ms.jit(net.construct) if mode == "graph" else net
    packed = call(ms.Tensor(inputs)).asnumpy()
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            n = len(sequences[i]) - 1
            alone = logits(net, [sequences[i][:-1]])[0]
            np.testing.assert_allclose(packed[r, start:start + n], alone, rtol=1e-4, atol=1e-4)
            start += n


def test_document_ids_as_a_second_argument_or_stacked_give_the_same_logits(net):
    _, inputs, _ = packed_documents()
    stacked = logits(net, inputs)
    apart = net(ms.Tensor(inputs[:, 0]), ms.Tensor(inputs[:, 1])).asnumpy()
    np.testing.assert_array_equal(apart, stacked)
    # Without the ids the same tokens attend across documents: the ids are what keeps them apart.
    assert np.abs(logits(net, inputs[:, 0]) - stacked).max() > 1e-3


def test_the_mask_is_block_diagonal_and_causal_and_positions_restart_per_document():
    documents = np.array([[1, 1, 1, 2, 2, 3, 0, 0]], np.int32)
    mask = document_mask(ms.Tensor(documents)).asnumpy()[0]
    for query in range(8):
        for key in range(8):
            same = documents[0, query] == documents[0, key] != NO_DOCUMENT
            assert mask[query, key] == (same and key <= query), (query, key)
    assert document_positions(ms.Tensor(mask[None])).asnumpy().tolist() == [[0, 1, 2, 0, 1, 0, 0, 0]]


def test_a_packed_rows_summed_loss_and_count_are_those_of_its_documents_alone(net):
    sequences, inputs, rows = packed_documents(seed=6)
    _, targets = pack_rows(sequences, 32)
    loss_sum, count = TokenLoss(net)(ms.Tensor(inputs), ms.Tensor(targets))
    alone = [TokenLoss(net)(*(ms.Tensor(a) for a in pad_batch([s]))) for s in sequences]
    assert float(count) == sum(float(c) for _, c in alone) == sum(len(s) - 1 for s in sequences)
    np.testing.assert_allclose(float(loss_sum), sum(float(l) for l, _ in alone), rtol=1e-5)
