"""Grid configuration and autotuning options, mirroring the C structs field for field.

Array fields are writable NumPy views into the object's own storage: assigning to an
element or slice (``config.pdims[:] = 2, 2``) changes the configuration, and a view keeps
the object alive. Assigning a whole field replaces its contents after checking length and
element type.
"""

from __future__ import annotations

import difflib
import enum
from typing import Any, ClassVar, Generic, Self, TypeVar, overload

import numpy as np
import numpy.typing as npt

from ._enums import AutotuneGridMode, DataType, HaloCommBackend, RankOrder, TransposeCommBackend
from ._errors import InvalidUsageError

__all__ = ["GridDescAutotuneOptions", "GridDescConfig"]

_T = TypeVar("_T")
_V = TypeVar("_V")
_E = TypeVar("_E", bound=enum.IntEnum)


def _element_ok(v: Any, kind: str) -> bool:
    """Tell whether one Python or NumPy scalar fits an element of ``kind``."""
    is_bool = isinstance(v, (bool, np.bool_))
    if kind == "bool":
        return is_bool or (isinstance(v, (int, np.integer)) and v in (0, 1))
    if kind == "int":
        return isinstance(v, (int, np.integer)) and not is_bool
    return isinstance(v, (int, float, np.integer, np.floating)) and not is_bool


def _check_elements(name: str, value: Any, kind: str, scalar_ok: bool = False) -> np.ndarray:
    """Convert ``value`` to an array, rejecting element types that do not fit ``kind``.

    Booleans are not integers here, and non-integral numbers are not integers (nothing is
    truncated); integers must fit a C ``int`` (``InvalidUsageError``). ``scalar_ok``
    accepts a single value (element assignment).
    """
    if isinstance(value, (str, bytes)) or (np.isscalar(value) and not scalar_ok):
        raise TypeError(f"{name}: expected a tuple, list or array, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nesting, e.g. (64, (64,), 64)
        raise TypeError(f"{name}: expected numbers, got {value!r}") from None
    if arr.dtype == object:
        raise TypeError(f"{name}: expected numbers, got {value!r}")
    if isinstance(value, np.ndarray):
        # Whole arrays: their dtype says it.
        if kind == "bool":
            ok = arr.dtype == np.bool_ or (arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all())
        elif kind == "int":
            ok = arr.dtype.kind in "iu"
        else:
            ok = arr.dtype.kind in "iuf"
    else:
        # Python scalars and sequences: each element's own type (True is not 1 here).
        items = [value] if np.isscalar(value) else list(_flatten(value))
        ok = all(_element_ok(v, kind) for v in items)
    if not ok:
        expected = {"bool": "booleans", "int": "integers", "float": "real numbers"}[kind]
        raise TypeError(f"{name}: expected {expected}, got {value!r}")
    if kind == "int" and not _fits_int32(arr):
        raise InvalidUsageError(f"{name}: values must fit int32, got {value!r}")
    return arr


def _fits_int32(value: Any) -> bool:
    """Tell whether every integer of ``value`` fits a C ``int`` (the structs' integer fields)."""
    a = np.asarray(value)
    return not a.size or bool(((a >= np.iinfo(np.int32).min) & (a <= np.iinfo(np.int32).max)).all())


def _flatten(value: Any) -> Any:
    """Yield the scalars of a nested sequence."""
    for v in value:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        elif isinstance(v, np.ndarray):
            yield from v.reshape(-1).tolist()
        else:
            yield v


class _FieldArray(np.ndarray):
    """The NumPy view of an array field: element and slice assignments are type-checked.

    Results of arithmetic on it are plain arrays.
    """

    _field: str = ""
    _kind: str = "float"

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._field:
            _check_elements(self._field, value, self._kind, scalar_ok=True)
        super().__setitem__(key, value)

    def fill(self, value: Any) -> None:
        """Set every element to ``value``, checked like an assignment."""
        self[...] = value

    def __array_finalize__(self, obj: Any) -> None:
        self._field = getattr(obj, "_field", "")
        self._kind = getattr(obj, "_kind", "float")

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        out = np.asarray(array).view(np.ndarray)
        return out[()] if return_scalar else out


class _Field(Generic[_V]):
    """A declared field of a struct: its name (given by the owner class), default and doc.

    Values live in the instance's ``_scalars`` dict (``_arrays`` for array fields), which
    ``_Struct`` fills with the defaults; subclasses check what is assigned.
    """

    store = "_scalars"

    def __init__(self, default: Any, doc: str) -> None:
        self.default = default
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: object, owner: type) -> _V: ...
    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return getattr(obj, self.store)[self.name]


class _ArrayField(_Field[npt.NDArray[Any]], Generic[_T]):
    """A fixed-shape array field (elements of ``kind``), stored as a checked view in the owner's ``_arrays``."""

    store = "_arrays"

    def __init__(self, shape: tuple[int, ...], kind: str, default: Any, doc: str) -> None:
        super().__init__(default, doc)
        self.shape = shape
        self.kind = kind
        self.dtype = {"int": np.int32, "bool": np.bool_, "float": np.float64}[kind]

    def make(self) -> np.ndarray:
        arr = np.full(self.shape, self.default, dtype=self.dtype).view(_FieldArray)
        arr._field, arr._kind = self.name, self.kind
        return arr

    def __set__(self, obj: object, value: Any) -> None:
        arr = _check_elements(self.name, value, self.kind)
        if arr.shape != self.shape:
            raise InvalidUsageError(f"{self.name}: expected {_shape_text(self.shape)} values, got shape {arr.shape}")
        np.ndarray.__setitem__(obj._arrays[self.name], Ellipsis, arr)  # type: ignore[attr-defined]


def _shape_text(shape: tuple[int, ...]) -> str:
    return " x ".join(str(s) for s in shape) if len(shape) > 1 else str(shape[0])


class _EnumField(_Field[_E]):
    """A field holding a member of one IntEnum."""

    def __init__(self, enum_type: type[_E], default: _E, doc: str) -> None:
        super().__init__(default, doc)
        self.enum_type = enum_type

    def __set__(self, obj: object, value: Any) -> None:
        if not isinstance(value, self.enum_type):
            raise TypeError(f"{self.name}: expected a cudecomp.{self.enum_type.__name__} member, got {value!r}")
        obj._scalars[self.name] = value  # type: ignore[attr-defined]


class _ScalarField(_Field[_T]):
    """A plain bool, int or float field (a bool field takes only booleans)."""

    def __init__(self, kind: type, default: Any, doc: str) -> None:
        super().__init__(default, doc)
        self.kind = kind

    def __set__(self, obj: object, value: Any) -> None:
        # Unlike array elements, a bool field takes only booleans (not 0 or 1).
        ok = isinstance(value, (bool, np.bool_)) if self.kind is bool else _element_ok(value, self.kind.__name__)
        if not ok:
            raise TypeError(f"{self.name}: expected {self.kind.__name__}, got {value!r}")
        if self.kind is int and not _fits_int32(int(value)):
            raise InvalidUsageError(f"{self.name}: expected a value that fits int32, got {value}")
        obj._scalars[self.name] = self.kind(value)  # type: ignore[attr-defined]


class _Struct:
    """Common machinery: storage, copy, equality and repr over the declared fields."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        cls._fields = tuple(k for k, v in cls.__dict__.items() if isinstance(v, _Field))

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._scalars: dict[str, Any] = {}
        for name in self._fields:
            field = type(self).__dict__[name]
            if isinstance(field, _ArrayField):
                self._arrays[name] = field.make()
            else:
                self._scalars[name] = field.default

    def __setattr__(self, name: str, value: Any) -> None:
        # A misspelt field name would otherwise become a new attribute, and the setting
        # it was meant for would silently keep its default.
        if name not in type(self)._fields and name not in ("_arrays", "_scalars"):
            close = difflib.get_close_matches(name, type(self)._fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise AttributeError(f"{type(self).__name__} has no field {name!r}{hint}")
        object.__setattr__(self, name, value)

    def copy(self: Any) -> Any:
        """Return an independent copy."""
        other = type(self)()
        for k, v in self._arrays.items():
            other._arrays[k][...] = v
        other._scalars.update(self._scalars)
        return other

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Struct)
        return self._scalars == other._scalars and all(np.array_equal(v, other._arrays[k]) for k, v in self._arrays.items())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        for name in self._fields:
            v = getattr(self, name)
            if isinstance(v, np.ndarray):
                parts.append(f"{name}={v.tolist()}")
            elif isinstance(v, enum.Enum):
                parts.append(f"{name}={type(v).__name__}.{v.name}")
            else:
                parts.append(f"{name}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class GridDescConfig(_Struct):
    """Configuration of a grid descriptor (``cudecompGridDescConfig_t``), with the C defaults."""

    gdims = _ArrayField[int]((3,), "int", 0, "Global grid extents [X, Y, Z].")
    gdims_dist = _ArrayField[int](
        (3,),
        "int",
        0,
        "Extents by which the grid is split among ranks, each at most the matching gdims entry; the cells beyond them "
        "(gdims - gdims_dist) go to the last rank along that axis. Used only when all three entries are non-zero, "
        "otherwise gdims is split.",
    )
    pdims = _ArrayField[int](
        (2,), "int", 0, "Process grid [P_rows, P_cols] with P_rows * P_cols ranks; [0, 0] lets the autotuner choose it."
    )
    rank_order = _EnumField(
        RankOrder,
        RankOrder.DEFAULT,
        "How ranks are laid onto the process grid; DEFAULT resolves to ROW_MAJOR (or COL_MAJOR when "
        "CUDECOMP_USE_COL_MAJOR_RANK_ORDER=1) and is written back resolved by Handle.create_grid.",
    )
    transpose_comm_backend = _EnumField(TransposeCommBackend, TransposeCommBackend.MPI_P2P, "Communication backend of the transposes.")
    transpose_axis_contiguous = _ArrayField[bool](
        (3,),
        "bool",
        False,
        "Per pencil (X, Y, Z): store the pencil's own axis fastest, the other two following cyclically "
        "(Y-pencil in memory order Y, Z, X), instead of the default X, Y, Z.",
    )
    transpose_mem_order = _ArrayField[int](
        (3, 3),
        "int",
        -1,
        "Per pencil (rows X, Y, Z): the global axes in memory order, fastest first; overrides transpose_axis_contiguous. "
        "Either every entry -1 (unset) or every row a permutation of 0, 1, 2.",
    )
    halo_comm_backend = _EnumField(HaloCommBackend, HaloCommBackend.MPI, "Communication backend of the halo updates.")

    def _export(self) -> dict[str, Any]:
        """Plain values for the core, by field name."""
        return {
            "gdims": [int(v) for v in self.gdims],
            "gdims_dist": [int(v) for v in self.gdims_dist],
            "pdims": [int(v) for v in self.pdims],
            "rank_order": int(self.rank_order),
            "transpose_comm_backend": int(self.transpose_comm_backend),
            "transpose_axis_contiguous": [bool(v) for v in self.transpose_axis_contiguous],
            "transpose_mem_order": [[int(v) for v in row] for row in self.transpose_mem_order],
            "halo_comm_backend": int(self.halo_comm_backend),
        }

    def _apply(self, pdims: tuple[int, int], transpose: int, halo: int, rank_order: int) -> None:
        """Write back what grid creation resolved."""
        self.pdims[...] = pdims
        self._scalars["transpose_comm_backend"] = TransposeCommBackend(transpose)
        self._scalars["halo_comm_backend"] = HaloCommBackend(halo)
        self._scalars["rank_order"] = RankOrder(rank_order)

    @classmethod
    def _from_export(cls, values: dict[str, Any]) -> GridDescConfig:
        """Return a configuration holding what ``_export`` gives (the core's resolved configuration)."""
        cfg = cls()
        cfg.gdims[...] = values["gdims"]
        cfg.gdims_dist[...] = values["gdims_dist"]
        cfg.transpose_axis_contiguous[...] = values["transpose_axis_contiguous"]
        cfg.transpose_mem_order[...] = values["transpose_mem_order"]
        cfg._apply(values["pdims"], values["transpose_comm_backend"], values["halo_comm_backend"], values["rank_order"])
        return cfg


class GridDescAutotuneOptions(_Struct):
    """Autotuning options (``cudecompGridDescAutotuneOptions_t``), with the C defaults.

    Operation-indexed fields use the order X->Y, Y->Z, Z->Y, Y->X.
    """

    n_warmup_trials = _ScalarField[int](int, 3, "Untimed rounds per candidate before the timed ones.")
    n_trials = _ScalarField[int](int, 5, "Timed rounds per candidate.")
    grid_mode = _EnumField(
        AutotuneGridMode,
        AutotuneGridMode.TRANSPOSE,
        "Which search chooses the process grid when pdims is [0, 0]: TRANSPOSE (time of the four transposes) "
        "or HALO (time of the halo updates); the other search then runs on the chosen grid.",
    )
    dtype = _EnumField(DataType, DataType.DOUBLE, "Element type of the buffers the candidates are timed on.")
    allow_uneven_decompositions = _ScalarField[bool](bool, True, "Also try process grids that do not split the distributed axes evenly.")
    disable_mpi_backends = _ScalarField[bool](bool, False, "Leave the MPI backends out of backend searches.")
    disable_nccl_backends = _ScalarField[bool](bool, False, "Leave the NCCL backends out of backend searches.")
    disable_nvshmem_backends = _ScalarField[bool](bool, False, "Leave the NVSHMEM backends out of backend searches.")
    skip_threshold = _ScalarField[float](
        float,
        0.0,
        "Abandon a candidate after its first timed round when skip_threshold times that round's time exceeds the "
        "best time so far; 0 disables skipping.",
    )
    autotune_transpose_backend = _ScalarField[bool](
        bool, False, "Search the transpose backend (otherwise the config's transpose_comm_backend is kept)."
    )
    transpose_use_inplace_buffers = _ArrayField[bool](
        (4,), "bool", False, "Per transpose (X->Y, Y->Z, Z->Y, Y->X): time it in place instead of out of place."
    )
    transpose_use_library_arrays = _ScalarField[bool](
        bool,
        False,
        "Time the transposes between arrays like GridDesc.empty_pencil's (node-shared host memory on the CPU variant, "
        "exported device memory on the GPU variant), where DIRECT then copies each cell once (on GPUs where the copy "
        "engine carries every chunk, or with CUDECOMP_SINGLE_COPY=1; set it when the solver allocates its pencils with empty_pencil).",
    )
    transpose_op_weights = _ArrayField[float](
        (4,),
        "float",
        1.0,
        "Per transpose (X->Y, Y->Z, Z->Y, Y->X): weight of its time in a candidate's score; 0 leaves it out.",
    )
    transpose_input_halo_extents = _ArrayField[int](
        (4, 3), "int", 0, "Per transpose (rows X->Y, Y->Z, Z->Y, Y->X): input halo extents (X, Y, Z) while timing."
    )
    transpose_output_halo_extents = _ArrayField[int](
        (4, 3), "int", 0, "Per transpose (rows X->Y, Y->Z, Z->Y, Y->X): output halo extents (X, Y, Z) while timing."
    )
    transpose_input_padding = _ArrayField[int](
        (4, 3), "int", 0, "Per transpose (rows X->Y, Y->Z, Z->Y, Y->X): input padding (X, Y, Z) while timing."
    )
    transpose_output_padding = _ArrayField[int](
        (4, 3), "int", 0, "Per transpose (rows X->Y, Y->Z, Z->Y, Y->X): output padding (X, Y, Z) while timing."
    )
    autotune_halo_backend = _ScalarField[bool](bool, False, "Search the halo backend (otherwise the config's halo_comm_backend is kept).")
    halo_extents = _ArrayField[int]((3,), "int", 0, "Halo extents (X, Y, Z) of the halo updates timed.")
    halo_periods = _ArrayField[bool]((3,), "bool", False, "Periodicity (X, Y, Z) of the halo updates timed.")
    halo_axis = _ScalarField[int](int, 0, "Pencil whose halo updates are timed (0 = X, 1 = Y, 2 = Z).")
    halo_padding = _ArrayField[int]((3,), "int", 0, "Padding (X, Y, Z) of the halo updates timed.")

    def _export(self) -> dict[str, Any]:
        """Plain values for the core."""
        out: dict[str, Any] = {}
        for name in self._fields:
            v = getattr(self, name)
            out[name] = v.tolist() if isinstance(v, np.ndarray) else (int(v) if isinstance(v, enum.IntEnum) else v)
        return out
