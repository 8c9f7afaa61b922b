"""Each mechanism's options as a request schema, generated from its module alone (issue 27).

:func:`options_model` turns a mechanism's ``Options`` dataclass (:mod:`service.dp.core.options`)
into a strict pydantic model that refuses unknown options (``extra="forbid"``): one field per
option with its type, its default (none when the default depends on the problem; the
description says what it is), its fixed bounds and its sentence. An option the mechanism lists
in ``capabilities.tunable_options`` also takes ``{"candidates": [...]}`` where the request
allows private tuning.

:class:`MechanismRequest` is the base of request bodies that name a ``mechanism`` and its
``params``. The body keeps the wire format it always had, but

* its ``params`` are checked against the named mechanism's options model as the body is read,
  so an unknown option or a wrong type is a 422 whose ``errors[].loc`` is
  ``["body", "params", <option>]``, before anything is looked up, stored or charged (an
  unknown mechanism is left to the use case, which says which ones exist);
* its OpenAPI schema (:meth:`MechanismRequest.union_schema`, put in the document by
  ``service.api.openapi_doc``) is a union discriminated by ``mechanism`` with one variant per
  registered mechanism, ``<Base><Mechanism>``, whose ``params`` is ``<Mechanism>Options``
  (``<Mechanism>TunableOptions`` where tunable options may be candidates).

The mechanism's own ``validate_params`` stays the authority on the rules that depend on the
problem or on several options; this layer only refuses earlier, with the option named.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    create_model,
    model_validator,
)
from pydantic.json_schema import models_json_schema

from service.api.schemas.base import RequestModel
from service.dp.analysis.selection import MAX_CANDIDATES
from service.dp.core.base import Mechanism
from service.dp.core.options import option_specs
from service.dp.mechanisms import MECHANISMS

__all__ = [
    "MechanismRequest",
    "OptionCandidates",
    "check_params",
    "options_model",
    "options_model_name",
]


class OptionCandidates(RequestModel):
    """Candidate values of a tunable option, one of which PrivFit chooses privately within the
    fit's (ε, δ) (:mod:`service.domain.fits.tuning`)."""

    candidates: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        min_length=1, max_length=MAX_CANDIDATES, description="Distinct values > 0."
    )


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def options_model_name(mechanism: str, *, tunable: bool = False) -> str:
    """``dp_sgd`` → ``DpSgdOptions``: the schema's name of a mechanism's options;
    ``DpSgdTunableOptions`` for the ones whose tunable options also take candidates."""
    return f"{_camel(mechanism)}{'Tunable' if tunable else ''}Options"


def _without_none(tp: Any) -> tuple[Any, bool]:
    """(``tp`` without ``None``, whether it allowed None)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            return (rest[0] if len(rest) == 1 else Union[rest]), True  # noqa: UP007
    return tp, False


def _json_number(value: float) -> float | int:
    return int(value) if float(value).is_integer() and abs(value) < 2**63 else value


@cache
def _build(mechanism: str, options: Any, tunable: tuple[str, ...]) -> type[BaseModel]:
    hints = typing.get_type_hints(options)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        spec = option_specs(options)[f.name]
        base, nullable = _without_none(hints[f.name])
        bounds = {k: _json_number(v) for k, v in spec.bounds().items()}
        tp: Any = Annotated[base, Field(**bounds)] if bounds else base  # type: ignore[call-overload]
        description = spec.doc
        if spec.computed_default is not None:
            # no fixed default: null is not a value the mechanism takes, and the schema shows
            # the default in words only
            description = f"{description} Default: {spec.computed_default}."
        elif nullable:
            tp = tp | None
        if f.name in tunable:
            tp = tp | OptionCandidates
            description = (
                f'{description} Or `{{"candidates": [...]}}` (1 to {MAX_CANDIDATES} distinct '
                "values > 0): PrivFit chooses one privately within the same (ε, δ)."
            )
        fields[f.name] = (
            tp,
            Field(
                default=f.default,
                description=description,
                json_schema_extra=None if spec.computed_default is None else _drop_default,
            ),
        )
    doc = " ".join((inspect.getdoc(options) or "").split())
    model: type[BaseModel] = create_model(
        options_model_name(mechanism, tunable=bool(tunable)),
        __config__=ConfigDict(extra="forbid", strict=True),
        __doc__=f"The options (`params`) of `{mechanism}`. {doc}".strip(),
        __module__=__name__,
        **fields,
    )
    return model


def _drop_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def options_model(mechanism: Mechanism, *, tunable: bool = False) -> type[BaseModel]:
    """The request schema of ``mechanism``'s options (module docstring); with ``tunable`` its
    ``capabilities.tunable_options`` also take ``{"candidates": [...]}``."""
    names = tuple(mechanism.capabilities.tunable_options) if tunable else ()
    options: Any = mechanism.options  # a class: hashable, as the cache needs
    return _build(mechanism.name, options, names)


def check_params(mechanism: str, params: Mapping[str, Any], *, tunable: bool) -> None:
    """Raise a ``ValidationError`` located at ``params.<option>`` when ``params`` do not fit
    the options of ``mechanism`` (nothing for a mechanism the registry does not know)."""
    mech = MECHANISMS.get(mechanism)
    if mech is None:
        return
    try:
        options_model(mech, tunable=tunable).model_validate(dict(params))
    except ValidationError as exc:
        raise ValidationError.from_exception_data(
            "params",
            [
                {**error, "loc": ("params", *error["loc"])}  # type: ignore[typeddict-unknown-key]
                for error in exc.errors()
            ],
        ) from None


class MechanismRequest(RequestModel):
    """A request body with a ``mechanism`` and its ``params`` (module docstring). Subclasses
    declare both fields; ``tunable_params`` says whether tunable options may be candidates."""

    #: Whether the request's tunable options may be ``{"candidates": [...]}``.
    tunable_params: typing.ClassVar[bool] = False
    #: The examples of the body's schema (the union's, not each variant's).
    body_examples: typing.ClassVar[list[dict[str, Any]]] = []

    mechanism: str
    params: dict[str, Any]

    @model_validator(mode="wrap")
    @classmethod
    def _typed_params(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        body = handler(data)
        if isinstance(body, MechanismRequest) and not cls._is_variant():
            check_params(body.mechanism, body.params, tunable=cls.tunable_params)
        return body

    @classmethod
    def _is_variant(cls) -> bool:
        return cls.model_fields["mechanism"].annotation is not str

    @classmethod
    def variants(cls) -> dict[str, type[MechanismRequest]]:
        """One model per registered mechanism: this body with ``mechanism`` fixed and
        ``params`` its options model (the OpenAPI schema's union; never used to read)."""
        return {
            name: _variant(cls, name, options_model(mech, tunable=cls.tunable_params))
            for name, mech in MECHANISMS.items()
        }

    @classmethod
    def union_schema(cls, ref_template: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The OpenAPI schema of this body (the union of :meth:`variants`, discriminated by
        ``mechanism``) and the definitions it refers to (each variant and its options), with
        references made by ``ref_template`` (e.g. ``"#/components/schemas/{model}"``)."""
        variants = cls.variants()
        _, top = models_json_schema(
            [(model, "validation") for model in variants.values()], ref_template=ref_template
        )
        definitions: dict[str, Any] = top.get("$defs", {})
        refs = {name: ref_template.format(model=model.__name__) for name, model in variants.items()}
        schema: dict[str, Any] = {
            "title": cls.__name__,
            "description": inspect.getdoc(cls) or "",
            "oneOf": [{"$ref": ref} for ref in refs.values()],
            "discriminator": {"propertyName": "mechanism", "mapping": refs},
        }
        if cls.body_examples:
            schema["examples"] = copy.deepcopy(cls.body_examples)
        return schema, definitions


@cache
def _variant(
    base: type[MechanismRequest], mechanism: str, options: type[BaseModel]
) -> type[MechanismRequest]:
    model: type[MechanismRequest] = create_model(
        f"{base.__name__}{_camel(mechanism)}",
        __base__=base,
        __doc__=f"{' '.join((inspect.getdoc(base) or '').split())} Mechanism `{mechanism}`.",
        __module__=__name__,
        mechanism=(Literal[mechanism], Field(description=f"`{mechanism}`.")),  # type: ignore[arg-type]
        params=(
            options,
            Field(
                default_factory=options,
                description=f"The options of `{mechanism}` (each optional).",
            ),
        ),
    )
    return model
