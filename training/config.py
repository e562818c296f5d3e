"""``TrainConfig``: every training hyper-parameter once, with its default, help text and CLI flag.

Both the trainer's argparse parser (:func:`trainer.options.build_parser`) and the Training page's launch form
(:func:`launching.form.form_defaults`, :func:`launching.form.build_command`) are derived from the fields of
:class:`TrainConfig`, so a new option is added in one place and is settable from both. A field's metadata holds:

* ``help``, ``group`` (the ``--help`` section), ``flag`` (default ``--field-name``), ``choices``, ``metavar``;
* ``type`` for an option whose default is ``None`` (else the default's type; ``bool`` fields are switches);
* ``check``: what the launch form validates (``positive``, ``nonneg``, ``rate`` = a probability in [0, 1),
  ``min100``);
* ``show``: the launcher writes this option on every command it builds (the recipe at a glance), not only when it
  differs from the default.

The parsed options stay a :class:`TrainConfig` (frozen: a changed value is a new config, made with
:func:`dataclasses.replace`) from the command line through the loop. A run's saved ``train_args.json`` becomes one
again with :meth:`TrainConfig.from_saved`: an option that did not exist when the run was written gets its default, so
the trainer never has to guess, and a key that is no option is ignored and named (a run folder written by another
version of the trainer still resumes).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields

from corpora.files import dataset_path
from model.baseline import IMPLS
from model.config import ARCHITECTURES

CORPORA = ("ding", "brown")
VOCAB_SOURCES = ("all", "sentences")
PRECISIONS = ("auto", "fp32", "bf16")
SELECT = ("auto", "loss", "chrf")


def opt(default, help: str = "", group: str = "run", **meta):  # `help` shadows the builtin: argparse's own word
    """A :class:`TrainConfig` field: ``default`` plus the metadata described in the module docstring."""
    return field(default=default, metadata={"help": help, "group": group, **meta})


@dataclass(frozen=True)
class TrainConfig:
    """The options of ``python -m trainer.train`` (lengths in tokens, rates as probabilities, times in minutes),
    plus ``init_card``, which is no option: what a warm start's checkpoint had seen (:func:`training.checkpoints.
    warm_start` sets it; saved in ``train_args.json`` so that a resumed warm start still writes it into its card)."""

    out: str = opt(None, "run folder (created)", type=str, required=True)
    resume: bool = opt(False, "continue the run in --out exactly where it stopped")
    # --- data
    data_dir: str = opt(str(dataset_path("train").parent), group="data")
    corpus: str = opt(
        "ding",
        "ding = the shipped EN–DE sentence pairs; brown = English sentences of the Brown "
        "corpus (decoder-only models; assets/data/brown)",
        "data",
        choices=CORPORA,
    )
    train_tsv: str | None = opt(
        None, "your own source<TAB>target training file (replaces the shipped sentences)", "data", type=str
    )
    valid_tsv: str | None = opt(None, "validation file (default: the shipped valid split)", "data", type=str)
    mix: str | None = opt(
        None,
        "train on a mixture of the prepared real corpora with these shares (how many times "
        "each corpus's pairs are repeated; 0 leaves it out), e.g. "
        "tatoeba=1,multi30k=2,bcontrast=1,ding=1; needs python -m corpora prepare all. The "
        "valid pairs are each chosen corpus's first 400, unless --valid-tsv is given",
        "data",
        type=str,
        metavar="CORPUS=N,…",
    )
    sentence_repeat: int = opt(1, "upsample the sentence pairs this many times", "data", check="positive")
    phrases_per_epoch: int = opt(0, "phrase pairs sampled into each epoch", "data", check="nonneg")
    words_per_epoch: int = opt(0, "word pairs sampled into each epoch", "data", check="nonneg")
    dict_share: float = opt(
        0.0,
        "share of every step's tokens taken from the dictionary (phrase and word pairs), "
        "mixed into the same optimizer step as the sentences; 0 = off (then "
        "--phrases/--words-per-epoch apply)",
        "data",
        check="rate",
    )
    limit_train: int = opt(0, "use only the first N sentence pairs (smoke tests)", "data", check="nonneg")
    reverse: bool = opt(
        False,
        "train German → English: the two sides of every pair (sentences, dictionary, valid) "
        "swapped; the model that back-translates German text into synthetic pairs for an "
        "English → German one (python -m corpora backtranslate; Sennrich et al. 2016)",
        "data",
    )
    vocab_size: int = opt(8000, group="data", check="min100", show=True)
    vocab_from: str = opt(
        "all",
        "what the BPE vocabulary is learned from: all = sentences + phrases + words; "
        "sentences = the sentence pairs only (rarer pieces are then common in the sentences)",
        "data",
        choices=VOCAB_SOURCES,
    )
    tokenizer: str | None = opt(
        None,
        "reuse this tokenizer.json (or a checkpoint folder's) instead of learning a new "
        "BPE vocabulary (--vocab-size and --vocab-from are then unused): runs that "
        "share a vocabulary have losses in the same units (nats per the same tokens) "
        "and can be compared",
        "data",
        type=str,
        metavar="FILE",
    )
    bpe_dropout: float = opt(
        0.0,
        "BPE-dropout (Provilkov et al. 2020): each merge skipped with this probability when "
        "the training data is re-encoded every epoch; validation and the saved tokenizer "
        "never use it",
        "data",
        check="rate",
    )
    init_from: str | None = opt(
        None,
        "start from this checkpoint's weights, tokenizer and architecture with a fresh "
        "optimizer (a warm start: carry a long run across sessions without its "
        "optimizer state)",
        "data",
        type=str,
        metavar="CHECKPOINT",
    )
    # --- model
    arch: str = opt(
        "encoder-decoder",
        "encoder-decoder = EN→DE translator; decoder-only = GPT-style language model "
        "on both sides of every pair (continues a prompt; evaluated by "
        "loss/perplexity, no BLEU)",
        "model",
        choices=ARCHITECTURES,
        show=True,
    )
    impl: str = opt(
        "ours",
        "ours = this project's Transformer; torch = the torch.nn.Transformer baseline (model/baseline.py)",
        "model",
        choices=IMPLS,
    )
    d_model: int = opt(256, group="model", check="positive", show=True)
    n_heads: int = opt(4, group="model", check="positive", show=True)
    encoder_layers: int | None = opt(None, "encoder depth (default: --layers)", "model", type=int, check="nonneg")
    decoder_layers: int | None = opt(None, "decoder depth (default: --layers)", "model", type=int, check="nonneg")
    layers: int = opt(
        3, "encoder and decoder layers each (decoder-only: the decoder layers)", "model", check="positive", show=True
    )
    d_ff: int = opt(1024, group="model", check="positive", show=True)
    dropout: float = opt(0.1, group="model", check="rate", show=True)
    attention_dropout: float = opt(
        0.0,
        "dropout on the attention weights (the paper has none; torch.nn.Transformer uses --dropout)",
        "model",
        check="rate",
    )
    activation_dropout: float | None = opt(
        None, "dropout on the FFN's inner activations (default: --dropout)", "model", type=float, check="rate"
    )
    decoder_layerdrop: float = opt(
        0.0, "probability of skipping a whole decoder layer in a training step (LayerDrop)", "model", check="rate"
    )
    src_word_dropout: float = opt(
        0.0,
        "probability of replacing a source token by <unk> in training (never <eos> or padding)",
        "model",
        check="rate",
    )
    tgt_word_dropout: float = opt(
        0.0,
        "probability of replacing a decoder input token by <unk> in training (never "
        "<bos> or padding; the tokens to predict are unchanged)",
        "model",
        check="rate",
    )
    pos_encoding: str = opt("sinusoidal", group="model", show=True)
    norm_first: bool = opt(False, "pre-LN (default: post-LN as in the paper)", "model")
    max_len: int = opt(128, group="model", check="positive")
    # --- optimisation
    peak_lr: float = opt(1e-3, "learning rate at the end of warmup", "optimisation", check="positive", show=True)
    warmup: int = opt(4000, group="optimisation", check="nonneg", show=True)
    lr_step_offset: int | None = opt(
        None,
        "evaluate the schedule at step + N (default: the --init-from checkpoint's "
        "step, its own offset included, else 0), so a warm start continues the "
        "decayed learning rate instead of climbing to the peak again",
        "optimisation",
        type=int,
    )
    rewarmup: int = opt(
        200,
        "with --init-from: steps of linear re-warmup for the fresh optimizer moments",
        "optimisation",
        check="nonneg",
    )
    cooldown_steps: int = opt(
        0,
        "decay the learning rate linearly to 0 over the last N steps before --max-steps "
        "(the decay of warmup-stable-decay, Hägele et al. 2024); 0 = none. With --resume "
        "it may be given to cool a copy of a run down",
        "optimisation",
        check="nonneg",
    )
    label_smoothing: float = opt(0.1, group="optimisation", check="rate", show=True)
    weight_decay: float = opt(
        0.0,
        "AdamW decoupled weight decay on the weight matrices (0 = Adam, as in the paper)",
        "optimisation",
        check="nonneg",
    )
    batch_tokens: int = opt(2000, "padded src+tgt tokens per batch", "optimisation", check="positive", show=True)
    clip: float = opt(1.0, "gradient-norm clip", "optimisation", check="positive")
    max_steps: int = opt(10_000, group="optimisation", check="positive", show=True)
    max_minutes: float = opt(0.0, "stop after this wall time (0 = no limit)", "optimisation", check="nonneg")
    seed: int = opt(1, group="optimisation", check="nonneg", show=True)
    device: str = opt("auto", group="optimisation", show=True)
    threads: int = opt(
        0,
        "CPU threads per process (0 = OMP_NUM_THREADS if set, else all cores ÷ processes)",
        "optimisation",
        check="nonneg",
    )
    precision: str = opt(
        "auto",
        "auto = bf16 autocast on CUDA and on CPUs with native bf16 (avx512_bf16/amx_bf16), "
        "else fp32; master weights stay fp32",
        "optimisation",
        choices=PRECISIONS,
    )
    compile: bool = opt(
        False,
        "optional: torch.compile the model and its loss for training, with dynamic shapes "
        "(off by default; on CPU it works but the compile takes long)",
        "optimisation",
    )
    fused_optimizer: bool = opt(
        False,
        "Adam/AdamW as one fused kernel over all parameters (torch's fused=True; "
        "the same updates, fewer launches on a GPU)",
        "optimisation",
    )
    pad_multiple: int = opt(
        1,
        "pad each batch's source and target lengths up to a multiple of N (1 = off), so "
        "that batch shapes repeat (--compile, GPU kernels); padding is masked, the loss "
        "is the same",
        "optimisation",
        check="positive",
    )
    # --- logging
    log_every: int = opt(50, group="logging", check="positive", show=True)
    peak_tflops: float | None = opt(
        None,
        "peak TFLOP/s of one device, for the logged mfu (default: known CUDA GPUs' "
        "dense bf16 peak; on CPU no mfu unless given)",
        "logging",
        type=float,
    )
    eval_every: int = opt(1000, group="logging", check="positive", show=True)
    select: str = opt(
        "auto",
        "what picks best/: valid loss, or valid chrF (auto: chrF for a translator, loss otherwise)",
        "logging",
        choices=SELECT,
    )
    patience: int = opt(
        0, "stop after this many evaluations without a better --select score (0 = never)", "logging", check="nonneg"
    )
    keep_last: int = opt(
        0,
        "keep the weights of the last K evaluations in evals/step-N (for python -m tools.average)",
        "logging",
        check="nonneg",
    )
    eval_sentences: int = opt(
        300,
        "valid sentences translated for BLEU/chrF (not used by a decoder-only run)",
        "logging",
        check="nonneg",
        show=True,
    )
    eval_batch: int = opt(
        64,
        "valid sentences greedily translated at once during training (a GPU takes all of "
        "--eval-sentences in one batch: fewer decoding steps, each launching the same kernels; "
        "a sentence's translation does not depend on its batch)",
        "logging",
        check="positive",
    )
    test_at_end: bool = opt(
        False, "score best/ on the shipped test split at the end (decoder-only: test loss and perplexity)", "logging"
    )
    fp16_weights: bool = opt(False, "store best/ weights in float16 (half the size)", "logging")
    no_progress: bool = opt(False, group="logging")
    snapshots: bool = opt(
        True, "skip the log-spaced checkpoints/step-N/ and probes.jsonl", "logging", flag="--no-snapshots"
    )
    # --- not an option (neither a flag nor on the form)
    init_card: dict | None = field(default=None, metadata={"option": False})

    @classmethod
    def from_saved(cls, saved: dict) -> tuple[TrainConfig, list[str]]:
        """``(config, ignored keys)`` of a run's saved options (``train_args.json``, possibly written before some
        option existed, or by a trainer that had options this one lacks): a missing option gets its default, a key
        that is no field is left out and returned, sorted, for the caller to name."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known}), sorted(set(saved) - known)

    def to_saved(self) -> dict:
        """The config as ``train_args.json`` holds it: every field, ``init_card`` only for a warm start."""
        out = asdict(self)
        if out["init_card"] is None:
            del out["init_card"]
        return out


#: The options, in order: ``{name: dataclasses.Field}`` (every field but those marked ``option: False``).
FIELDS = {f.name: f for f in fields(TrainConfig) if f.metadata.get("option", True)}


def flag_of(name: str) -> str:
    """The CLI flag of option ``name`` (``"d_model"`` → ``"--d-model"``; ``snapshots`` → ``"--no-snapshots"``)."""
    return FIELDS[name].metadata.get("flag") or "--" + name.replace("_", "-")


def value_type(name: str):
    """The Python type of option ``name``'s value (``bool`` for a switch; ``None`` for a plain string)."""
    f = FIELDS[name]
    if "type" in f.metadata:
        return f.metadata["type"]
    return None if isinstance(f.default, str) else type(f.default)


def defaults() -> dict:
    """``{option: default}`` of every option."""
    return {name: f.default for name, f in FIELDS.items() if f.default is not MISSING}
