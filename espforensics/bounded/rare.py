"""Fields that most objects of a class leave at their default, stored once written.

In: a slotted class (a dataclass with ``slots=True`` or ``__slots__``) with
a ``rare_fields`` attribute, None until one of its rare fields is written,
and each rare field declared as a class attribute ``name = Rare(default)``
(not annotated, so a dataclass does not take it for a field). Out: the
field reads and writes as a slot does: its default until written, then
the value written. Raises nothing.

Why: a capture of many short-lived SAs makes each check's
per-SA object once per SA, and a slot costs 8 bytes in every one of them
whether it is used or not. The counters of anomalies (duplicates,
reorders, deviating IVs, chained IVs...) and their frame sets stay at 0
or None in almost every SA: kept here, they cost nothing until an SA has
one, and then one small dict for that SA. Writing the default to a field
never written makes nothing (``count += 0``, ``flag = False``).
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar, overload

T = TypeVar("T")


class HasRare(Protocol):
    """An object whose rare fields are kept in ``rare_fields`` (None: all at default)."""

    rare_fields: dict[str, Any] | None


class Rare(Generic[T]):
    """A field of ``HasRare`` objects kept in their ``rare_fields`` once written."""

    __slots__ = ("_default", "_name")

    def __init__(self, default: T) -> None:
        self._default = default  # immutable (0, None, False, ""): shared by every object
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Rare[T]: ...

    @overload
    def __get__(self, obj: HasRare, owner: type | None = None) -> T: ...

    def __get__(self, obj: HasRare | None, owner: type | None = None) -> Rare[T] | T:
        if obj is None:
            return self
        fields = obj.rare_fields
        if fields is None:
            return self._default
        value: T = fields.get(self._name, self._default)
        return value

    def __set__(self, obj: HasRare, value: T) -> None:
        fields = obj.rare_fields
        if fields is None:
            default = self._default
            if value is default or (type(value) is type(default) and value == default):
                return  # 0 stays the int 0: a False or 0.0 written is kept as written
            fields = obj.rare_fields = {}
        fields[self._name] = value
