"""The decoding method as one value: what drafts, into which tree, with which options.

A :class:`Method` is made and checked once (:meth:`Method.parse`: the method name, its tree spec
resolved, for ``"auto"`` and tree families sized for the target's latency on this machine) and then
handed whole to every engine, backend, bench and search; it makes its own drafter memory and drafter.
So no path re-parses a tree spec or accepts an option another refuses. It is a value (frozen, equal
and hashed by its fields): what a value-sized tree learns while decoding lives in a
:class:`stand_runtime.sizing.session.SizingSession`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .checks import check_bool, check_int
from .drafters import (COPY_TOKENS, DYNAMIC_METHODS, METHODS, STORE_METHODS, TREE_METHODS, VALUE_COPY_TOKENS, Drafter,
                       Memory, check_method, new_memory)
from .store.drafting import DynamicTree, parse_dynamic
from .drafters.diagnostics import DraftQuality
from .drafters.prompt_lookup import PromptLookupDrafter
from .drafters.stand import StandDrafter
from .drafters.suffix_decoding import SuffixDecodingDrafter, SuffixMemory, SuffixSettings
from .drafters.token_recycling import RecyclingMatrix, TokenRecyclingDrafter
from .trees.tree_walk import Extension
from .sizing.value import ValueRule
from .errors import StandError
from .randomness import DraftNoise
from .store.ngram_store import NGramStore
from .drafters.prior import SuccessorPrior
from .target.latency import check_same_target, target_identity
from .target.model_facts import check_model
from .target.sampling import SamplingParams
from .sizing.tree_choice import AUTO, DEFAULT_FAMILY, check_auto_available, machine_tree
from .trees.tree import DraftTree
from .trees.tree_io import TreeFile, is_family, resolve_tree
from .verify import check_verification

DEFAULT_TREES = {"stand": "dynamic-auto", "stand-det": AUTO, "recycle": "heuristic-80"}
"""Each tree method's default tree: for STAND the value-sized dynamic tree (``"dynamic-auto"``: each step
drafts the best-first nodes and copied tokens that pay for themselves in expected tokens per second,
:mod:`stand_runtime.sizing.value`; docs/decisions.md); for ``stand-det``
(the paper's deterministic ablation) the calibrated static family sized for this machine's latency
(``"auto"``, :mod:`stand_runtime.sizing.tree_choice`), which stays every STAND method's offline-calibrated
option; for Token Recycling its own static tree (its paper's depth profile 8/21/25/15/8/3)."""

ALLOCATIONS = ("batch", "row")
"""How a value-sized dynamic tree is sized in a batch (:attr:`Ablation.allocation`)."""


@dataclass(frozen=True)
class Ablation:
    """Expert switches for ablation studies, diagnostics and calibration, not for decoding: each default is
    the toolkit's behaviour. A :class:`Method` takes them only through :meth:`Method.ablated`.

    Attributes:
        extend: STAND on a static tree: spend the node budget that store misses leave on best-first
            chains beyond the tree (False: the tree alone, as calibration replays it).
        diagnose: STAND: measure q against p at every step's root (one row at a time only).
        batch_verify: verify a step's rows at once on the logits' device (:mod:`stand_runtime.verify_batch`):
            True, False, or None = for a batch on an accelerator (docs/algorithms.md §4.7).
        allocation: a value-sized tree in a batch: ``"batch"`` (one node budget per forward over every
            row's candidates, :mod:`stand_runtime.sizing.allocation`) or ``"row"`` (each row sized alone).

    Raises:
        StandError: a switch that is not a bool (``batch_verify``: or None), an allocation not in
            :data:`ALLOCATIONS`.
    """

    extend: bool = True
    diagnose: bool = False
    batch_verify: bool | None = None
    allocation: str = "batch"

    def __post_init__(self) -> None:
        object.__setattr__(self, "extend", check_bool("extend", self.extend))
        object.__setattr__(self, "diagnose", check_bool("diagnose", self.diagnose))
        if self.batch_verify is not None:
            object.__setattr__(self, "batch_verify", check_bool("batch_verify", self.batch_verify))
        if not isinstance(self.allocation, str) or self.allocation not in ALLOCATIONS:
            raise StandError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {self.allocation!r}")

    @property
    def stand_switches(self) -> tuple[str, ...]:
        """The STAND-only switches set away from their defaults, as words (``"diagnose"``, ``"extend=False"``)."""
        return tuple(word for word, on in (("diagnose", self.diagnose), ("extend=False", not self.extend)) if on)


@dataclass(frozen=True)
class Method:
    """A decoding method, resolved: build it with :meth:`parse` (checked once, never changed after).

    Attributes:
        name: one of :data:`stand_runtime.drafters.METHODS`.
        tree: the resolved tree: a :class:`DraftTree` (static), a :class:`DynamicTree` (STAND's
            best-first tree), or None (methods without a tree: pld, suffix, ar).
        feed_rejected: STAND: also feed the store with p at rejected tree nodes.
        copy_tokens: STAND: tokens of the prompt-lookup copy path grafted onto the draft (0 = off);
            None = the default: :data:`COPY_TOKENS` (10), or for a value-sized tree
            :data:`VALUE_COPY_TOKENS` (64, of which the rule keeps what pays).
        max_nodes: cap on drafted nodes per row and step in a batch (None = none).
        sized: the tree was sized for this machine from a family (``"auto"``).
        suffix: SuffixDecoding's settings (None = its defaults).
        prior: STAND: the target's successor prior, filling the 1-token context of a step's root
            where the store has none (:mod:`stand_runtime.drafters.prior`;
            :func:`stand_runtime.drafters.prior.method_prior` gives it); None = no prior.
        verification: how sampled drafts are verified (:data:`stand_runtime.verify.VERIFICATION_RULES`):
            ``"invariant"`` (drafter-invariant: a seed gives plain decoding's tokens, whatever drafts;
            docs/seeds.md) or ``"rejection"`` (the STAND paper's recursive rejection sampling).
        sized_for: the target whose latency on this machine sized the tree (``"auto"``, a family), as
            ``(key, description)`` (:func:`stand_runtime.target.latency.target_identity`); None when
            nothing was sized from a target. Decoding another target with it is refused
            (:meth:`check_target`): its draft sizes were chosen for a forward of other cost.
        ablation: the expert switches (:class:`Ablation`; :meth:`ablated`), the defaults unless set.

    Raises:
        StandError: options the method does not take (:func:`stand_runtime.drafters.check_method`; an
            ablation of STAND's options for another method), a tree method without a resolved tree, or
            a bad ``max_nodes``.
    """

    name: str
    tree: DraftTree | DynamicTree | None = None
    feed_rejected: bool = False
    copy_tokens: int | None = None
    max_nodes: int | None = None
    sized: bool = False
    suffix: SuffixSettings | None = None
    prior: SuccessorPrior | None = None
    sized_for: tuple[str, str] | None = None
    verification: str = "invariant"
    ablation: Ablation = Ablation()

    def __post_init__(self) -> None:
        check_verification(self.verification)
        if self.copy_tokens is None:
            object.__setattr__(self, "copy_tokens", VALUE_COPY_TOKENS if self.value_sized else COPY_TOKENS)
        if not isinstance(self.ablation, Ablation):
            raise StandError(f"ablation must be an Ablation, not {type(self.ablation).__name__}")
        check_method(self.name, tree=self.tree, feed_rejected=self.feed_rejected, copy_tokens=self.copy_tokens,
                     stand_switches=self.ablation.stand_switches)
        object.__setattr__(self, "copy_tokens", int(self.copy_tokens))
        if self.name in TREE_METHODS and not isinstance(self.tree, (DraftTree, DynamicTree)):
            raise StandError(f"method {self.name!r} needs a resolved tree: build it with Method.parse")
        if isinstance(self.tree, DynamicTree) and self.name not in DYNAMIC_METHODS:
            raise StandError(f"a dynamic tree applies to {', '.join(DYNAMIC_METHODS)}, not {self.name!r}")
        if self.max_nodes is not None:
            object.__setattr__(self, "max_nodes", check_max_nodes(self.max_nodes, self.name))
        if self.suffix is not None and (self.name != "suffix" or not isinstance(self.suffix, SuffixSettings)):
            raise StandError("suffix settings apply to method 'suffix' (a SuffixSettings)")
        if self.prior is not None and not isinstance(self.prior, SuccessorPrior):
            raise StandError(f"prior must be a SuccessorPrior (method_prior) or None, not {type(self.prior).__name__}")
        if self.prior is not None and self.name not in STORE_METHODS:
            raise StandError(f"a successor prior drafts for {', '.join(STORE_METHODS)}, not {self.name!r}")
        if self.sized_for is not None and not (isinstance(self.sized_for, tuple) and len(self.sized_for) == 2
                                               and all(isinstance(part, str) and part for part in self.sized_for)
                                               and self.sized):
            raise StandError("sized_for must be None or (key, description) non-empty strings of a method sized "
                             "for its target: build it with Method.parse")

    @classmethod
    def parse(cls, name: str, tree=None, model=None, batch: int = 1, *, feed_rejected: bool = False,
              copy_tokens: int | None = None, max_nodes=AUTO, suffix: SuffixSettings | None = None,
              prior: SuccessorPrior | None = None, verification: str = "invariant") -> "Method":
        """The method ``name`` with its tree resolved and its options checked.

        Args:
            name: the decoding method.
            tree: a :class:`DraftTree`, :class:`TreeFile`, file path, bundled tree name, ``"dynamic"``
                / ``"dynamic-N"`` (STAND), ``"auto"`` or a tree family (file or bundled name: its
                member sized for this machine); None = the method's default (:data:`DEFAULT_TREES`).
            model: the target; needed to size ``"auto"`` and families (from its latency here).
            batch: rows per target forward the tree is sized for (an int >= 1).
            feed_rejected, copy_tokens: STAND's options (see :class:`Method`).
            max_nodes: cap on drafted nodes per row and step in a batch: an int >= 0, None (none) or
                ``"auto"`` (:func:`auto_node_cap`).
            suffix: SuffixDecoding's settings.
            prior: the successor prior STAND drafts with (see :class:`Method`).
            verification: ``"invariant"`` or ``"rejection"`` (see :class:`Method`).

        Raises:
            StandError: unknown method, a missing optional package, an option the method does not
                take, a bad tree (or one without draft nodes), a family to size without a model, a
                model that is not a loaded causal LM, a ``prior`` of the wrong type.
        """
        if isinstance(name, Method):
            raise StandError("Method.parse takes a method name; this is already a Method")
        if model is not None:
            check_model(model)
        batch = check_int("batch", batch, 1)
        check_method(name, tree=tree, feed_rejected=feed_rejected, copy_tokens=copy_tokens)
        max_nodes = check_max_nodes(max_nodes, name)
        spec = DEFAULT_TREES.get(name) if tree is None else tree
        resolved = method_tree(name, spec, model, batch)
        sized = name in TREE_METHODS and sized_family(spec) is not None
        if max_nodes == AUTO:
            max_nodes = auto_node_cap(resolved, sized, batch)
        sized_for = target_identity(model) if model is not None and sized else None
        check_verification(verification)
        return cls(name, resolved, feed_rejected, copy_tokens, max_nodes, sized, suffix, prior, sized_for, verification)

    def ablated(self, **switches) -> "Method":
        """This method with the expert switches ``switches`` (:class:`Ablation`'s fields) set.

        Raises:
            StandError: a switch :class:`Ablation` does not have or refuses, or one the method does not take.
        """
        unknown = sorted(set(switches) - set(Ablation.__dataclass_fields__))
        if unknown:
            raise StandError(f"unknown ablation switch {unknown[0]!r} (valid: {', '.join(Ablation.__dataclass_fields__)})")
        return replace(self, ablation=replace(self.ablation, **switches))

    @property
    def value_sized(self) -> bool:
        """True for a value-sized dynamic tree (``dynamic-auto``): each step sized by the expected-value
        rule of a :class:`stand_runtime.sizing.session.SizingSession`."""
        return isinstance(self.tree, DynamicTree) and self.tree.sized

    @property
    def label(self) -> str:
        """The method and its tree as tables show them (``stand [dynamic-80]``, ``stand [dynamic-auto-80]``,
        ``recycle [12 nodes]``)."""
        if isinstance(self.tree, DynamicTree):
            return f"{self.name} [{self.tree.name}]"
        if isinstance(self.tree, DraftTree):
            return f"{self.name} [{self.tree.num_nodes} nodes]"
        return self.name

    def new_memory(self, vocab: int, base: NGramStore | None = None) -> Memory | None:
        """A fresh drafter memory of this method's kind (None for methods without one); ``base``: a
        STAND store's cross-prompt memory (:func:`stand_runtime.drafters.new_memory`).

        Raises:
            StandError: ``vocab`` (the target's vocabulary size) not an integer >= 1; a bad ``base``.
        """
        return new_memory(self.name, vocab, self.tree, base)

    def problem_memory(self, vocab: int, cross: Memory | None = None) -> Memory | None:
        """A new problem's drafter memory: a fresh one (``cross`` None); with a cross-prompt memory
        ``cross`` (one of :meth:`new_memory`'s), a fresh STAND store over it (its ``base``), another
        method's ``cross`` itself (shared by every problem).

        Raises:
            StandError: what :meth:`new_memory` raises.
        """
        if cross is None:
            return self.new_memory(vocab)
        return self.new_memory(vocab, base=cross) if isinstance(cross, NGramStore) else cross

    def check_target(self, model) -> None:
        """Raises StandError when this method was sized for another target (architecture, dtype or
        device; :attr:`sized_for`) than ``model``, the one it is about to decode."""
        check_same_target(self.sized_for, model, f"{self.name} method", "parse it again with the model it decodes")

    def check_memory(self, memory: Memory | None, vocab: int) -> None:
        """Raises StandError when ``memory`` is of the wrong kind, keeps contexts shorter than this
        method's tree drafts from, or was built for another vocabulary."""
        if memory is None:
            return
        check_method(self.name, tree=self.tree, memory=memory)
        if isinstance(memory, RecyclingMatrix) and memory.vocab != vocab:
            raise StandError(f"the RecyclingMatrix has {memory.vocab} rows but the model's vocabulary is {vocab}")
        if isinstance(memory, NGramStore) and memory.max_token_id >= vocab:
            raise StandError(f"the store holds token id {memory.max_token_id}, outside the model's vocabulary ({vocab})")

    def drafter(self, memory: Memory | None, randomness: DraftNoise, params: SamplingParams, vocab: int,
                seed: int | None = None, value: ValueRule | None = None) -> Drafter | None:
        """This method's drafter for one sequence (None for plain decoding).

        Args:
            memory: the drafter memory (shared by the calls given the same object); None = a fresh one.
            randomness: the sequence's drafting noise (:class:`stand_runtime.randomness.DraftNoise`: its
                random stream, or its position noise under the drafter-invariant verifier).
            params: the target sampling distribution.
            vocab: the target's vocabulary size.
            seed: seeds the diagnostics' private generator.
            value: a value-sized tree's rule for this call (:meth:`SizingSession.rule
                <stand_runtime.sizing.session.SizingSession.rule>`); None for other trees.

        Raises:
            StandError: see :meth:`check_memory`; a value-sized tree without its rule, or a rule for another tree.
        """
        self.check_memory(memory, vocab)
        if (value is not None) != self.value_sized:
            raise StandError("a value rule goes with a value-sized dynamic tree (dynamic-auto) and it needs one: "
                             "SizingSession.rule(tree.num_nodes, rows)")
        if memory is None:
            memory = self.new_memory(vocab)
        if self.name == "ar":
            return None
        if self.name == "pld":
            return PromptLookupDrafter()
        if self.name == "recycle":
            return TokenRecyclingDrafter(self.tree, memory)
        if self.name == "suffix":
            return SuffixDecodingDrafter(memory, self.suffix or SuffixSettings())
        stochastic = self.name == "stand" and not params.greedy
        quality = DraftQuality(seed=seed) if self.ablation.diagnose else None
        extended = self.ablation.extend and isinstance(self.tree, DraftTree)
        extension = Extension(budget=self.tree.num_nodes) if extended else None
        if self.prior is not None and self.prior.vocab != vocab:
            raise StandError(f"the successor prior covers {self.prior.vocab} tokens, the target's vocabulary {vocab}")
        return StandDrafter(self.tree, memory, randomness if stochastic else None, params, self.feed_rejected, quality,
                            extension, self.copy_tokens, value, self.prior)


def as_method(method: "Method | str", model=None, batch: int = 1) -> Method:
    """``method`` itself, or a method name parsed with its defaults (:meth:`Method.parse`)."""
    if isinstance(method, Method):
        return method
    return Method.parse(method, None, model, batch)


def check_max_nodes(max_nodes, method: str | None = None):
    """``max_nodes`` if it is an int >= 0 (numpy integers accepted), None or ``"auto"``.

    Raises:
        StandError: anything else, or a cap given to a method that drafts nothing (``ar``).
    """
    if max_nodes is None or (isinstance(max_nodes, str) and max_nodes == AUTO):
        return max_nodes
    try:
        max_nodes = check_int("max_nodes", max_nodes, 0)
    except StandError:
        raise StandError(f"max_nodes must be an integer >= 0, None or 'auto', got {max_nodes!r}") from None
    if method == "ar":
        raise StandError("max_nodes caps drafted nodes: method 'ar' drafts none")
    return max_nodes


def auto_node_cap(tree, sized: bool, batch: int) -> int | None:
    """The default cap on drafted nodes per row in a batch of ``batch`` rows.

    A batched forward costs the padded width times the rows, so one wide row (STAND's copied
    tokens beyond its tree) widens every row. When the tree was sized for this batch from the
    latency profile (``"auto"`` or a family), rows are capped at the tree's size; an explicit tree
    (or a batch of one) is not capped.
    """
    if batch < 2 or not sized or tree is None:
        return None
    return tree.num_nodes


def sized_family(spec) -> str | None:
    """The tree family a tree spec asks to size for this machine: the bundled default for
    ``"auto"``, the family itself for a family file or bundled family name; None for a fixed tree."""
    if isinstance(spec, str) and spec == AUTO:
        return DEFAULT_FAMILY
    return str(spec) if is_family(spec) else None


def method_tree(method: str, spec, model=None, batch: int = 1) -> DraftTree | DynamicTree | None:
    """The tree ``method`` drafts into, resolved from ``spec`` (see :meth:`Method.parse`); None for
    methods without a tree.

    Raises:
        StandError: a bad tree, a tree without draft nodes, or a family to size without a model.
    """
    if method not in TREE_METHODS:
        return None
    dynamic = parse_dynamic(spec)
    if dynamic is not None:
        return dynamic
    family = sized_family(spec)
    if family is not None:
        check_auto_available(family)
        if model is None:
            raise StandError(f"the tree {spec!r} is sized from the target's latency on this machine: "
                             f"parse the method with the model")
        return machine_tree(model, family, batch=batch).tree
    resolved = resolve_tree(spec)
    if resolved.num_nodes == 0:
        name = f" {spec}" if isinstance(spec, str) else ""
        raise StandError(f"tree{name} has no draft nodes: use method 'ar' for plain decoding")
    return resolved


def check_tree_spec(method: str, spec) -> None:
    """Check ``spec`` for ``method`` before the model loads: a dynamic tree or a fixed tree resolved,
    a family (``"auto"``) found and valid.

    Raises:
        StandError: what :func:`method_tree` would raise, except the missing model.
    """
    check_method(method, tree=spec)
    if method not in TREE_METHODS:
        return
    spec = DEFAULT_TREES[method] if spec is None else spec
    family = sized_family(spec)
    if family is not None:
        check_auto_available(family)
    else:
        method_tree(method, spec)


__all__ = ["ALLOCATIONS", "Ablation", "DEFAULT_TREES", "Method", "as_method", "auto_node_cap", "check_max_nodes",
           "check_tree_spec", "method_tree", "sized_family", "METHODS", "STORE_METHODS", "TREE_METHODS", "SuffixMemory", "TreeFile"]
