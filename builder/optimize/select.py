"""Step 9, the choice: the fastest accepted candidate measured on this host, ties broken by
`builder.measure.decide`; by rule where nothing could be measured."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


from builder.optimize import recipe as recipes
from builder.optimize.layout import FILE_NAMES, RULE_ORDER, TF, XLA_SIGNATURE
from builder.optimize.recipe import Recipe
from builder.optimize.target import TargetFacts, measured_note, rule_reason
from builder.optimize.context import Made, Run
from builder.report import ArtifactResult, Candidate, Selection

# --- step 9: select -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """What to serve: the artifact (relative to OUT), the runtime, and the signature a request without
    signature_name gets."""

    artifact: str
    runtime: str
    signature: str
    selection: Selection


def select_step(recipe: Recipe, facts: TargetFacts, results: list[ArtifactResult], candidates: list[Candidate],
                contract_signature: str = "serving_default") -> tuple[Choice, list[str]]:
    """(choice, notes).

    On this host, whatever the recipe: the fastest accepted candidate (any artifact the recipe built x runtime x
    precision x signature; only the named artifact's when the recipe names `choose`) by measured p50; those within noise of the fastest (overlapping median confidence intervals) break the tie by
    the smaller file, then the smaller runtime (LiteRT first, TensorFlow last), then the contract's own
    signature over serving_xla, then the name (`pick_fastest`). Elsewhere, or for GPU targets: by rule (the recipe's choice, else the first accepted in RULE_ORDER, else the SavedModel), the
    contract's signature.
    """
    accepted = {r.path: r for r in results if r.accepted}
    notes: list[str] = []
    by_format = {r.format: r for r in results}
    if facts.is_host and not recipes.tensor_core_gpus(facts.gpu_capabilities):
        named = FILE_NAMES.get(recipe.choose, recipe.choose) if recipe.choose_named else None
        usable = [c for c in candidates if c.p50_us is not None and not c.error and c.artifact in accepted
                  and (named is None or c.artifact == named)]
        if usable:
            chosen = pick_fastest(usable, contract_signature)
            how = f"measured on this host: {describe_pick(chosen, usable, contract_signature)}"
            if named is not None:
                how += f" (the recipe names {named}; its runtime and precision were measured)"
            elif recipe.name != "auto":
                how += f" (among what recipe {recipe.name} builds)"
            how += measured_note(facts)
            return Choice(chosen.artifact, chosen.runtime, chosen.signature or contract_signature,
                          Selection(True, how, tuple(candidates))), notes
        notes.append("no accepted artifact could be measured on this host; choosing by rule")
    preferred = by_format.get(recipe.choose)
    if preferred is not None and preferred.accepted:
        chosen_path = preferred.path
    else:
        order = RULE_ORDER + ("saved_model",)
        fallback = next((by_format[f] for f in order if f in by_format and by_format[f].accepted), None)
        if fallback is not None and recipe.name == "auto":
            notes.append(f"{FILE_NAMES.get(recipe.choose, recipe.choose)} was rejected by the gate or not produced; "
                         f"auto chose the accepted {fallback.path} instead")
            chosen_path = fallback.path
        else:
            chosen_path = FILE_NAMES.get(recipe.choose, recipe.choose)
    format = next((r.format for r in results if r.path == chosen_path), "")
    from builder.optimize.layout import evaluated_on

    runtime = TF if chosen_path == FILE_NAMES["saved_model"] else evaluated_on(format or "tflite_fp32")
    how = rule_reason(facts)
    return Choice(chosen_path, runtime, contract_signature, Selection(False, how, tuple(candidates))), notes


def _timed(c: Candidate, contract_signature: str) -> Any:
    """A candidate as the shared decision sees it: median, its CI, and the tie order (file size, runtime, the
    contract's own signature before serving_xla, name)."""
    from builder.measure.decide import Timed

    p50 = float(c.p50_us)  # type: ignore[arg-type]
    return Timed(_name(c), p50, c.ci_low_us if c.ci_low_us is not None else p50,
                 c.ci_high_us if c.ci_high_us is not None else p50, c.size_bytes, c.runtime,
                 int((c.signature or contract_signature) != contract_signature))


def pick_fastest(candidates: list[Candidate], contract_signature: str = "serving_default") -> Candidate:
    """`builder.measure.decide.pick`: among the candidates within noise of the fastest (overlapping median
    confidence intervals), the smaller file, then the smaller runtime (LiteRT first), then the contract's own
    signature, then the name; so serving_xla is served by default only when it is faster beyond noise."""
    from builder.measure.decide import pick

    timed = {_name(c): c for c in candidates if c.p50_us is not None}
    return timed[pick([_timed(c, contract_signature) for c in timed.values()]).name]


def _name(c: Candidate) -> str:
    return f"{c.artifact}{'#' + c.signature if c.signature == XLA_SIGNATURE else ''} on {c.runtime}"


def describe_pick(chosen: Candidate, candidates: list[Candidate], contract_signature: str = "serving_default") -> str:
    from builder.measure.decide import fastest

    best = fastest([_timed(c, contract_signature) for c in candidates if c.p50_us is not None])
    text = f"{_name(chosen)}, p50 {chosen.p50_us:.1f} us"
    if best.name != _name(chosen):
        text += (f" (fastest: {best.name} {best.p50:.1f} us [95% CI {best.ci_low:.1f}-{best.ci_high:.1f}], within "
                 "noise of it; the smaller file / smaller runtime / the contract's signature wins the tie)")
    return text + f"; {len(candidates)} accepted candidates timed in one interleaved loop"


def choice_step(run: Run, made: Made) -> Made:
    """The choice (`builder.optimize.select`): the fastest accepted candidate measured here, else by rule;
    where the model has other signatures, a line on how the chosen file serves them."""
    from builder.optimize import signatures as sigs

    plan = run.plan
    choice, lines = select_step(plan.recipe, plan.facts, list(made.results), list(made.candidates),
                                       run.contract.signature)
    for line in lines:
        run.ledger.note(line)
    if plan.checks:
        chosen = next((r for r in made.results if r.path == choice.artifact), None)
        run.ledger.note(sigs.served_note(choice.artifact, choice.runtime, run.contract.signature, plan.checks,
                                         bool(chosen and chosen.accepted)))
    return replace(made, choice=choice)
