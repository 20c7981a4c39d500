"""`oarlock train`: train a small byte-level GPT on the standard library's docstrings.

configure(parser) declares the options; run(args) trains and returns the exit
status; main(argv) runs the command without going through `oarlock` (the tests
and `python -m oarlock_train` use it).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pickle
import sys
import time

HELP = "train a small byte-level GPT on the Python standard library's docstrings"

DESCRIPTION = """\
Train a byte-level GPT (vocab 256, width 128, 4 layers, 4 heads, rotary position
embeddings; about 0.86 M parameters) on the module docstrings of the Python
standard library, read from the source files. Every 20th document is held out
for validation. Losses are cross entropies in nats per byte; the unigram entropy
of the training bytes (printed at the start, dashed line in the plot) is what a
model that ignores context would reach.

Each training row packs several documents separated by a NUL byte. By default
attention is masked at those boundaries: a byte attends only to earlier bytes of
its own document (a NUL starts a new document), through flashmask_attention with
the causal-document mask. --no-document-mask trains with plain causal attention
across the whole row.

Writes to --out: model.safetensors, optimizer.pdopt and trainer.json (the
checkpoint, also written at every evaluation), loss.png (train and validation
loss against step) and sample.txt (text generated from --prompt).

--nproc N trains the same GPT on N ranks of this machine: the command starts them with `oarlock launch
-n N` (MPI, oarlock-xccl) and every rank trains through oarlock.distributed.fleet with hybrid_configs
dp_degree --dp, mp_degree --mp and sharding_degree --sharding, whose product must be N (--dp defaults to
what --mp and --sharding leave). --mp splits the model over its ranks (tensor parallel: vocabulary-parallel
embedding and head with a vocabulary-parallel cross entropy, the attention heads and MLP units split by
column- and row-parallel linears; it must divide the 4 heads), --sp adds sequence parallel inside those
ranks, --sharding partitions the optimizer states (stage 1), and the --dp x --sharding data ranks each
take an equal share of every batch (--batch-size must be a multiple of their number). Every layout starts
from the weights one process initialises with the same --seed and draws the same batches, so with
--dropout 0 its per-step losses equal a one-process run's (up to float32 rounding; with dropout each data
rank, and with --sp each mp rank, draws its own masks from a stream the checkpoint does not keep). Rank 0
alone prints, plots and writes the checkpoint, which holds the full weights and optimizer states: a run on
any layout (or one process) resumes it. With --log-dir, train/grad_norm is left out under --mp or
--sharding.

--moe-experts E makes every block's MLP a mixture of E experts (Paddle's MoELayer from
oarlock.incubate.distributed.models.moe): a gate routes each token to --moe-top-k of them: GShardGate for
k=2, SwitchGate for k=1 (both with a load-balancing aux loss; in training each expert takes at most 1.2 x
the tokens of the batch, the rest are dropped), the plain top-k NaiveGate (no aux loss) for k > 2. Each
expert is an MLP of the dense one's shape (--moe-expert-hidden sets its hidden width). The objective is
the cross entropy plus --moe-aux-weight x the gates' aux losses summed over the blocks; the logged loss is
the cross entropy alone, and the aux loss is logged beside it (progress line, train/aux_loss in --log-dir).
--ep N splits the experts over N ranks (expert parallel: hybrid_configs ep_degree; tokens travel to their
experts' ranks by all-to-all), which take different shares of every batch as data-parallel ranks do;
--nproc defaults to --ep, and --dp to what --ep leaves of --nproc. The MoE GPT combines with --dp and
--ep, not with --mp, --sharding or --pp.

--log-dir DIR also writes TensorBoard event files to DIR (view them with
`tensorboard --logdir DIR`): train/loss, train/lr, train/tokens_per_s and
train/grad_norm (before clipping) at every step (and train/aux_loss with experts), val/loss at every evaluation,
memory/allocated_mib and memory/max_allocated_mib, and the options as text."""

DEFAULT_STEPS = 500
DEFAULT_AUX_WEIGHT = 0.01   # moe_model.DEFAULT_AUX_WEIGHT (not imported: `oarlock --help` stays light)
DEFAULT_OUT = "oarlock-train-out"


def _typed(kind, accepts, check):
    """An argparse type whose error says what the option accepts (argparse prefixes the option's name)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {accepts}, got {text!r}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"expected {accepts}, got {text!r}")
        return value
    return parse


positive_int = _typed(int, "a positive integer", lambda v: v >= 1)
nonnegative_int = _typed(int, "an integer >= 0", lambda v: v >= 0)
positive_float = _typed(float, "a positive number", lambda v: v > 0)
nonnegative_float = _typed(float, "a number >= 0", lambda v: v >= 0 and math.isfinite(v))
dropout_rate = _typed(float, "a number in [0, 1)", lambda v: 0 <= v < 1)
seq_length = _typed(int, "an integer from 2 to 4096", lambda v: 2 <= v <= 4096)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add("--steps", type=positive_int, default=DEFAULT_STEPS,
        help=f"optimisation steps in all, the span of the learning-rate schedule (default {DEFAULT_STEPS}: "
             f"about 2 minutes on 2 idle CPU cores)")
    add("--seed", type=int, default=0,
        help="seed for oarlock.seed(): initialisation, batch order and dropout; the same seed and options give "
             "the same losses (default 0)")
    add("--batch-size", type=positive_int, default=16, help="sequences per step (default 16)")
    add("--seq-len", type=seq_length, default=128,
        help="bytes of context per sequence, 2 to 4096; the model's maximum length (default 128)")
    add("--lr", type=positive_float, default=6e-3,
        help="peak learning rate of AdamW: linear warmup from 0 over --warmup steps, then cosine decay to "
             "lr/10 at --steps (default 6e-3)")
    add("--warmup", type=nonnegative_int, default=None,
        help="warmup steps, fewer than --steps (default: 5%% of --steps, at most 100)")
    add("--dropout", type=dropout_rate, default=0.0,
        help="dropout rate of the embedding, the attention weights and the attention and MLP outputs, in "
             "[0, 1) (default 0)")
    add("--no-document-mask", action="store_true",
        help="plain causal attention over the whole packed row (scaled_dot_product_attention(is_causal=True)) "
             "instead of the default causal-document mask, which keeps attention inside each NUL-separated "
             "document (flashmask_attention)")
    add("--eval-every", type=positive_int, default=50,
        help="evaluate on the whole validation split and write the checkpoint every this many steps, and at "
             "the end (default 50)")
    add("--stop-after", type=positive_int, default=None, metavar="STEPS",
        help="stop after this many steps of this invocation (checkpoint written) without changing the "
             "schedule, to train in pieces with --resume (default: run to --steps)")
    add("--out", default=DEFAULT_OUT, metavar="DIR",
        help=f"output directory, created if missing (default ./{DEFAULT_OUT})")
    add("--log-dir", default=None, metavar="DIR",
        help="also write TensorBoard event files to DIR: loss, learning rate, tokens/s, gradient norm and memory "
             "at every step, validation loss at every evaluation (view: tensorboard --logdir DIR; default: none "
             "written, and the gradient norm is not computed)")
    add("--resume", action="store_true",
        help="continue from the checkpoint in --out (model, optimizer, scheduler, step, random state); the "
             "options that shape the run (--steps, --seed, --batch-size, --seq-len, --lr, --warmup, --dropout, "
             "--no-document-mask, "
             "--moe-*) must equal the checkpoint's, and the losses then equal an uninterrupted run's; the layout "
             "(--nproc, --dp, --mp, --sharding, --sp, --ep) may differ, the checkpoint holds the full model")
    add("--nproc", type=positive_int, default=None, metavar="N",
        help="ranks to train on, started on this machine by `oarlock launch -n N` (MPI); must equal --dp x --mp x "
             "--sharding x --pp x --ep (default --ep, i.e. 1: this process)")
    add("--dp", type=positive_int, default=None, metavar="D",
        help="data-parallel degree: replicas that average their gradients, each on its share of every batch "
             "(default: --nproc / (--mp x --sharding))")
    add("--mp", type=positive_int, default=1, metavar="M",
        help="tensor-parallel degree: the embedding, attention heads, MLP and output head split over M ranks; "
             "must divide the 4 heads (default 1)")
    add("--sharding", type=positive_int, default=1, metavar="S",
        help="sharding degree (stage 1): the optimizer states partitioned over S ranks, which also take "
             "different shares of every batch (default 1)")
    add("--sp", action="store_true",
        help="sequence parallel inside the --mp ranks (needs --mp 2 or more and --seq-len divisible by it): "
             "norms and residuals on 1/M of the sequence each")
    add("--pp", type=positive_int, default=1, metavar="P",
        help="pipeline-parallel degree: the GPT as a PipelineLayer (embedding, blocks, head) cut into P stages "
             "over P ranks, trained by PipelineParallel.train_batch; combines with --dp only (default 1)")
    add("--vpp", type=positive_int, default=1, metavar="V",
        help="model chunks (virtual pipeline stages) per --pp stage, for the interleaved schedule (default 1)")
    add("--schedule", default=None, metavar="MODE",
        help="pipeline schedule (pipeline_configs.schedule_mode): FThenB, 1F1B, VPP (interleaved 1F1B, needs "
             "--vpp 2 or more) or 1F1BOffload (1F1B with in-flight activations swapped to host memory); default "
             "1F1B, or VPP with --vpp")
    add("--micro-batches", type=positive_int, default=None, metavar="M",
        help="micro-batches per step with --pp (accumulate_steps); must divide each data rank's rows (default "
             "2 x --pp when it does, else one row each)")
    add("--recompute", action="store_true",
        help="recompute every transformer block's activations in backward instead of keeping them "
             "(fleet.utils.recompute; with --pp, PipelineLayer's recompute_interval=1); same losses, less memory")
    add("--memory-budget", default=None, metavar="BYTES",
        help="device memory per rank, e.g. 200MB or 1.5GiB: before the first step the memory planner "
             "(fleet.utils.offload.MemoryPlanner) profiles a step and puts each block under keep, recompute or "
             "offload to host memory (and the optimizer states on host if needed) at the least added time, so "
             "the step's peak stays under it; same losses; not with --recompute")
    add("--moe-experts", type=nonnegative_int, default=0, metavar="E",
        help="make every block's MLP a mixture of E experts (MoELayer); 0 is the dense GPT (default 0)")
    add("--moe-top-k", type=positive_int, default=None, metavar="K",
        help="experts each token is routed to, at most --moe-experts: 2 is GShardGate, 1 SwitchGate, more the "
             "plain top-k gate without aux loss (default 2; needs --moe-experts)")
    add("--moe-aux-weight", type=nonnegative_float, default=None, metavar="W",
        help="weight of the gates' load-balancing aux loss in the objective (default "
             f"{DEFAULT_AUX_WEIGHT:g}; needs --moe-experts)")
    add("--moe-expert-hidden", type=positive_int, default=None, metavar="H",
        help="hidden width of each expert's MLP (default: the dense MLP's, 4 x 128; needs --moe-experts)")
    add("--ep", type=positive_int, default=1, metavar="N",
        help="expert-parallel degree: the --moe-experts experts split over N ranks (it must divide them), which "
             "also take different shares of every batch (default 1)")
    add("--fp8", action="store_true",
        help="compute every Linear of the GPT's blocks in FP8 (oarlock.incubate.fp8: float8 inputs, weights and "
             "gradients with float32 accumulation and float32 master weights; the output head stays float32, as "
             "DeepSeek-V3's recipe keeps it; emulated in numpy on the CPU, so slower, not faster); one process only")
    add("--fp8-recipe", choices=("blockwise", "delayed", "current"), default=None,
        help="FP8 scaling recipe (needs --fp8): blockwise (DeepSeek-V3: 1x128 blocks of activations and "
             "gradients, 128x128 weight tiles, power-of-two scales, e4m3), delayed (TransformerEngine's "
             "DelayedScaling: per-tensor scales from an amax history, e4m3 forward and e5m2 gradients; not with "
             "--resume, --recompute or --memory-budget, its histories are not checkpointed) or current "
             "(per-tensor scales from each tensor's own amax) (default blockwise)")
    add("--sdc-check", nargs="?", const="1", default=None, metavar="SPEC",
        help="check for silent data corruption (oarlock-resilience's SDCMonitor): the data-parallel replicas' "
             "parameters compared after every step, inf/nan and loss-spike guards; SPEC: settings such as "
             "interval=2,replay_interval=100 (default: every step, no replay); sets OARLOCK_SDC_CHECK for every "
             "rank; needs --dp layouts (not --mp, --pp, --sharding, --ep)")
    add("--corpus-file", default=None, help=argparse.SUPPRESS)  # set by --nproc for the ranks it starts
    add("--device", default="cpu",
        help="device passed to oarlock.set_device(): cpu, or gpu, gpu:N or another plugin device when one is "
             "installed (default cpu)")
    add("--prompt", default="The ", help="start of the generated sample (default 'The ')")
    add("--sample-len", type=nonnegative_int, default=300,
        help="bytes to generate after the prompt; 0 skips the sample (default 300)")
    add("--top-k", type=nonnegative_int, default=5,
        help="sample each byte from the k most likely ones with a generator seeded by --seed; 0 means greedy "
             "(default 5)")


def _fail(message: str) -> int:
    print(f"oarlock train: error: {message}", file=sys.stderr)
    return 2


class UsageError(Exception):
    """A bad option value found after parsing (the message names the option). `every_rank`: raised on every
    rank of a --nproc run at the same point (the ranks agreed on it), so they can all report it before any
    rank's exit stops the job."""

    def __init__(self, message: str, every_rank: bool = False):
        super().__init__(message)
        self.every_rank = every_rank


def _agreed(error: str | None) -> str | None:
    """In a rank of a --nproc run: this rank's error, or another rank's, when any rank has one (all ranks get
    the same answer, so they fail together); alone: the error itself."""
    import oarlock.distributed as dist
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return error
    errors: list = []
    dist.all_gather_object(errors, error)
    first = next((e for e in errors if e is not None), None)
    return error or (None if first is None else f"another rank failed: {first}")


def run(args) -> int:
    # Imported here so that `oarlock --help` does not pay for the imports of every command.
    import oarlock

    previous = oarlock.get_device()
    try:
        try:
            oarlock.set_device(args.device)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"argument --device: {exc}") from None
        return _run(args)
    except UsageError as exc:
        status = _fail(str(exc))
        if exc.every_rank and getattr(args, "launched", False):
            import oarlock.distributed as dist
            sys.stderr.flush()
            dist.barrier()     # every rank failed here: each has printed its error before any exits
        return status
    finally:
        oarlock.set_device(previous)  # an in-process caller (a test, a notebook) keeps its device


def _run(args) -> int:
    from oarlock_train.parallel import layout_of
    from oarlock_train.trainer import TrainConfig

    warmup = min(100, args.steps // 20) if args.warmup is None else args.warmup
    if warmup >= args.steps:
        raise UsageError(f"argument --warmup: expected fewer steps than --steps ({args.steps}), got {warmup}")
    if "\0" in args.prompt:
        raise UsageError("argument --prompt: expected text without NUL bytes (NUL separates documents)")
    moe = _moe_options(args)
    nproc = args.nproc if args.nproc is not None else args.ep
    fp8 = _fp8_option(args, nproc)
    cfg = TrainConfig(steps=args.steps, seed=args.seed, batch_size=args.batch_size, seq_len=args.seq_len,
                      lr=args.lr, warmup=warmup, dropout=args.dropout, document_mask=not args.no_document_mask,
                      fp8=fp8, **moe)
    try:
        layout = layout_of(nproc, args.dp, args.mp, args.sharding, args.sp, args.batch_size, args.seq_len,
                           args.pp, args.vpp, args.micro_batches, args.schedule, ep=args.ep)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.memory_budget is not None:
        from oarlock.distributed.fleet.utils.offload import parse_bytes
        if args.recompute:
            raise UsageError("argument --memory-budget: not with --recompute (the planner puts blocks under "
                             "recompute where that is the cheapest way to meet the budget)")
        if layout.schedule == "1F1BOffload":
            raise UsageError("argument --memory-budget: not with --schedule 1F1BOffload (that schedule moves the "
                             "activations to host memory itself; one saved-tensor hook pair is active at a time)")
        try:
            parse_bytes(args.memory_budget, "argument --memory-budget")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    launched = getattr(args, "launched", False)
    if args.sdc_check is not None and layout.model_splits():
        raise UsageError(f"argument --sdc-check: compares data-parallel replicas of the whole model, and "
                         f"{', '.join(layout.model_splits())} splits it over ranks; use --dp (or --nproc alone)")
    if args.sdc_check is not None:   # read by the Trainer (and inherited by the ranks --nproc starts)
        os.environ["OARLOCK_SDC_CHECK"] = args.sdc_check
    if layout.nproc > 1 and not launched:
        return _launch(args, cfg, layout)
    if args.corpus_file is not None and not launched:
        raise UsageError("argument --corpus-file: only for the ranks `oarlock train --nproc N` starts")
    if launched and not _is_rank_zero():
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # errors still reach stderr
            return _train_here(args, cfg, layout)
    return _train_here(args, cfg, layout if launched else None)


def _fp8_option(args, nproc: int) -> str | None:
    """TrainConfig.fp8: the recipe name of --fp8 (None without it); UsageError where it does not apply."""
    if not args.fp8:
        if args.fp8_recipe is not None:
            raise UsageError(f"argument --fp8-recipe: got {args.fp8_recipe}, but FP8 is off; it needs --fp8")
        return None
    recipe = args.fp8_recipe or "blockwise"
    if nproc > 1:
        raise UsageError(f"argument --fp8: one process only (the parallel models' linears are not converted); got "
                         f"{nproc} ranks")
    if recipe == "delayed":
        for option, value in (("--resume", args.resume), ("--recompute", args.recompute),
                              ("--memory-budget", args.memory_budget)):
            if value:
                raise UsageError(f"argument --fp8-recipe delayed: not with {option} (the recipe's amax histories "
                                 "are neither checkpointed nor kept across a recomputed forward)")
    return recipe


def _moe_options(args) -> dict:
    """The TrainConfig fields of --moe-*; UsageError when they do not fit together or with the layout."""
    from oarlock_train.moe_model import check_moe

    if not args.moe_experts:   # the dense GPT: no --moe-* option or --ep has a meaning
        problems = [f"argument {option}: got {value}, but the model has no experts; it needs --moe-experts E"
                    for option, value in (("--moe-top-k", args.moe_top_k), ("--moe-aux-weight", args.moe_aux_weight),
                                          ("--moe-expert-hidden", args.moe_expert_hidden),
                                          ("--ep", args.ep if args.ep > 1 else None)) if value is not None]
    else:
        problems = check_moe(args.moe_experts, args.moe_top_k, args.ep)
        problems += [f"argument {option}: the MoE GPT (--moe-experts) combines with --dp and --ep only, got "
                     f"{option} {value}" for option, value in (("--mp", args.mp), ("--sharding", args.sharding),
                                                               ("--pp", args.pp)) if value > 1]
        # recompute runs the forward again: the gates' random routing would draw other numbers
        problems += [f"argument {option}: not with --moe-experts (recomputing a block would route its tokens "
                     f"again, with other random numbers)" for option, value in
                     (("--recompute", args.recompute), ("--memory-budget", args.memory_budget)) if value]
    if problems:
        raise UsageError("; ".join(problems))
    if not args.moe_experts:
        return {}
    return {"moe_experts": args.moe_experts, "moe_top_k": 2 if args.moe_top_k is None else args.moe_top_k,
            "moe_aux_weight": DEFAULT_AUX_WEIGHT if args.moe_aux_weight is None else args.moe_aux_weight,
            "moe_expert_hidden": args.moe_expert_hidden}


def _train_here(args, cfg, layout) -> int:
    """Train in this process: alone (layout None) or as one rank of a --nproc run."""
    if args.corpus_file is not None:  # a rank: the command that started it built the corpus
        from oarlock_train.corpus import load_corpus
        corpus = load_corpus(args.corpus_file)
    else:
        corpus = _build_corpus(cfg)
    print(corpus.summary(), flush=True)
    t0 = time.perf_counter()
    trainer = _start(args, cfg, corpus, layout)
    log = _open_log(args, trainer)
    try:
        if not _train(args, trainer, log):
            return 130
    finally:
        if log is not None:
            log.close()
    _finish(args, trainer, time.perf_counter() - t0)
    return 0


def _build_corpus(cfg):
    from oarlock_train.corpus import build_corpus

    try:
        return build_corpus(cfg.seq_len)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _launch(args, cfg, layout) -> int:
    """Start the ranks of a --nproc run (after the checks that need no rank) and return the launcher's status."""
    import tempfile

    from oarlock_train.corpus import save_corpus
    from oarlock_train.parallel import launch

    if args.resume:
        _saved_state(args, cfg)  # a refusal should come at once, not from every rank
    with tempfile.TemporaryDirectory(prefix="oarlock-train-") as tmp:
        # parsing the standard library takes seconds: once here rather than in every rank
        args.corpus_file = os.path.join(tmp, "corpus.npz")
        save_corpus(_build_corpus(cfg), args.corpus_file)
        argv = []
        for dest in vars(build_parser().parse_args([])):  # this command's options, not the `oarlock` CLI's
            value = getattr(args, dest)
            if dest in ("out", "log_dir") and value is not None:
                value = os.path.abspath(value)  # the ranks need not share this process's idea of "."
            if value is None or value is False:
                continue
            argv += [f"--{dest.replace('_', '-')}"] + ([] if value is True else [str(value)])
        print(f"oarlock train: starting {layout.nproc} ranks ({layout.describe()}) with oarlock launch", flush=True)
        return launch(layout.nproc, argv)


def _is_rank_zero() -> bool:
    import oarlock.distributed as dist

    dist.init_parallel_env()
    return dist.get_rank() == 0


def _saved_state(args, cfg) -> dict:
    """The checkpoint's trainer.json for --resume; UsageError when missing or from a run with other options."""
    from oarlock_train import checkpoint

    try:
        state = checkpoint.read_state(args.out)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    mismatches = checkpoint.config_mismatches(state["config"], cfg)
    if mismatches:
        raise UsageError("--resume needs the options of the checkpoint's run, or the losses would not "
                         "continue it: " + "; ".join(mismatches))
    return state


def _start(args, cfg, corpus, layout=None):
    """A new Trainer (a ParallelTrainer for a rank of a --nproc run), restored from the checkpoint in --out
    with --resume."""
    import oarlock
    from oarlock_train import checkpoint
    from oarlock_train.trainer import Trainer

    # checked before the model is built: a refusal should come at once
    state = _saved_state(args, cfg) if args.resume else None
    if layout is None:
        trainer = Trainer(cfg, corpus)
    elif layout.pp > 1:
        from oarlock_train.pipeline_trainer import PipelineTrainer
        trainer = PipelineTrainer(cfg, corpus, layout, recompute=args.recompute)
    else:
        from oarlock_train.parallel import ParallelTrainer
        trainer = ParallelTrainer(cfg, corpus, layout)
    trainer.recompute = args.recompute
    if args.memory_budget is not None:
        from oarlock.distributed.fleet.utils.offload import parse_bytes
        trainer.memory_budget = parse_bytes(args.memory_budget, "argument --memory-budget")
    where = f"{layout.nproc} ranks ({layout.describe()})" if layout else f"device {oarlock.get_device()}"
    moe = "" if not cfg.moe_experts else (
        f" ({trainer.model.active_parameters():,} active per token: {cfg.moe_experts} experts per block, top "
        f"{cfg.moe_top_k}, {cfg.moe.gate_type} gate, aux loss weight {cfg.moe_aux_weight:g})")
    print(f"model: {trainer.parameter_count():,} parameters{moe}; {cfg.steps} steps of {cfg.batch_size} x "
          f"{cfg.seq_len} bytes, AdamW lr {cfg.lr:g} (warmup {cfg.warmup}, cosine), "
          f"{'causal-document' if cfg.document_mask else 'plain causal'} attention, {where}",
          flush=True)
    if state is not None:
        error = None
        try:
            checkpoint.load(trainer, args.out, state)
        except pickle.UnpicklingError as exc:  # a damaged or planted optimizer.pdopt: refused, nothing run
            error = f"--resume: cannot use the checkpoint in {args.out!r}: {exc}"
        error = _agreed(error) if layout is not None else error
        if error is not None:
            raise UsageError(error, every_rank=layout is not None)
        print(f"resumed from {os.path.join(args.out, checkpoint.STATE_FILE)} at step {trainer.step}", flush=True)
    return trainer


def _open_log(args, trainer):
    """The TensorBoard log of --log-dir, or None."""
    if args.log_dir is None or not trainer.is_main:
        return None
    from oarlock_train.tensorboard_log import TensorBoardLog

    try:
        return TensorBoardLog(args.log_dir, trainer, resumed=args.resume)
    except OSError as exc:
        raise UsageError(f"argument --log-dir: cannot write to {args.log_dir!r}: {exc}") from None


def _train(args, trainer, log=None) -> bool:
    """Train to --steps (or --stop-after more steps), evaluating and saving as asked; False if interrupted.
    `log` (a TensorBoardLog or None) records every step and evaluation."""
    from oarlock_train import checkpoint
    from oarlock_train.progress import ProgressBar

    cfg, entropy = trainer.cfg, trainer.corpus.entropy_nats
    last = cfg.steps if args.stop_after is None else min(cfg.steps, trainer.step + args.stop_after)
    # ranks other than 0 print to their stdout, which is os.devnull (see _run): rank 0 alone shows progress
    bar = ProgressBar(total=cfg.steps, start=trainer.step, stream=None if trainer.is_main else sys.stdout)
    try:
        while trainer.step < last:
            if log is not None:
                log.step_started()
            planned = getattr(trainer.memory_planner, "fitted", False)
            try:
                trainer.plan_memory()
            except ValueError as exc:   # the budget cannot be met: every rank fails here (the planner agrees)
                raise UsageError(f"argument --memory-budget: {exc}",
                                 every_rank=hasattr(trainer, "layout")) from None   # a rank of a --nproc run
            loss = trainer.train_step()
            if not planned and trainer.memory_budget and getattr(trainer.memory_planner, "fitted", False):
                report = trainer.memory_planner.report()
                bar.message(f"memory plan (budget {report['budget']:,} bytes; peak without it "
                            f"{report['unconstrained_peak']:,}, with it {report['measured_peak']:,}): blocks "
                            f"{', '.join(report['policies'])}"
                            + ("; optimizer states on host" if report["optimizer_states_on_host"] else ""))
            aux = trainer.history.aux[-1] if len(trainer.history.aux) == len(trainer.history.train) else None
            if log is not None:
                log.step_finished(loss)
            bar.update(trainer.step, loss, trainer.tokens_per_step, "" if aux is None else f" | aux {aux:.4f}")
            if trainer.step % args.eval_every == 0 or trainer.step == last:
                valid = trainer.evaluate()
                if log is not None:
                    log.evaluated(valid)
                checkpoint.save(trainer, args.out)
                bar.message(f"step {trainer.step}: validation loss {valid:.4f} nats/byte "
                            f"({valid / entropy:.1%} of the unigram entropy {entropy:.4f}); checkpoint saved")
    except KeyboardInterrupt:
        bar.close()
        saved = trainer.history.valid[-1][0] if trainer.history.valid else None
        print(f"interrupted at step {trainer.step}; " + (f"the checkpoint in {args.out} is from step {saved}, "
              f"continue with --resume" if saved else "no checkpoint was written"), file=sys.stderr)
        return False
    bar.close()
    return True


def _finish(args, trainer, seconds: float) -> None:
    """Report the final validation loss against the unigram entropy, write the plot and the sample."""
    from oarlock_train import checkpoint
    from oarlock_train.generate import generate
    from oarlock_train.plotting import plot_losses

    cfg, corpus = trainer.cfg, trainer.corpus
    if not trainer.history.valid or trainer.history.valid[-1][0] != trainer.step:
        trainer.evaluate()  # e.g. --resume of a finished run: report the loss of the weights we have
    model = trainer.full_model() if args.sample_len else None  # with several ranks: gathered on rank 0
    if not trainer.is_main:
        return
    os.makedirs(args.out, exist_ok=True)
    valid, entropy = trainer.history.valid[-1][1], corpus.entropy_nats
    png = os.path.join(args.out, "loss.png")
    plot_losses(png, trainer.history.train, trainer.history.valid, entropy)
    print(f"trained to step {trainer.step}/{cfg.steps} in {seconds:.1f} s; validation loss {valid:.4f} nats/byte "
          f"({valid / math.log(2):.3f} bits/byte) vs unigram entropy {entropy:.4f} nats/byte "
          f"({corpus.entropy_bits:.3f} bits/byte)")
    print(f"wrote {os.path.join(args.out, checkpoint.MODEL_FILE)}, {checkpoint.OPTIMIZER_FILE}, "
          f"{checkpoint.STATE_FILE} and {png}")
    if args.sample_len:
        text = generate(model, args.prompt, args.sample_len, top_k=args.top_k, seed=cfg.seed)
        path = os.path.join(args.out, "sample.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        how = "greedy" if args.top_k == 0 else f"top-{args.top_k} sampling, seed {cfg.seed}"
        print(f"sample ({how}), saved to {path}:\n{text}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oarlock train")
    configure(parser)
    return parser


def main(argv=None, launched: bool = False) -> int:
    """Run the command with argv; launched=True in a rank that `oarlock train --nproc N` started (rank_main)."""
    args = build_parser().parse_args(argv)
    args.launched = launched
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
