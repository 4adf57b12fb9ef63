"""Dtype vocabularies of the three worlds (torch pickles, safetensors headers, numpy descrs).

Everything is normalised to torch's dtype names, so checks can compare dtypes across formats.
"""

from __future__ import annotations

#: torch dtype name -> item size in bytes. Aliases (``float``, ``half``...) map to canonical names.
ITEMSIZE: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
    "quint4x2": 1,
    "quint2x4": 1,
}

TORCH_ALIASES: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
}

#: ``torch.<Name>Storage`` class name -> dtype of its elements.
STORAGE_DTYPE: dict[str, str] = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}

#: safetensors header dtype -> torch dtype name.
SAFETENSORS_DTYPE: dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}

_NUMPY_KIND = {"f": "float", "i": "int", "u": "uint", "c": "complex"}


def numpy_descr_to_dtype(descr: str) -> tuple[str, int]:
    """``'<f4'`` -> ``('float32', 4)``. Big-endian and unknown descrs keep a ``numpy:`` name."""
    if not isinstance(descr, str) or len(descr) < 2:
        raise ValueError(f"not a numpy dtype descr: {descr!r}")
    order, kind, digits = descr[0], descr[1], descr[2:]
    if order not in "<>|=":
        raise ValueError(f"not a numpy dtype descr: {descr!r}")
    if not digits.isdigit():  # datetime64 ('<M8[ns]') and other descrs with units: kept by name
        return f"numpy:{descr}", 0
    size = int(digits)
    if kind == "b" and size == 1:
        return "bool", 1
    if kind in _NUMPY_KIND:
        name = f"{_NUMPY_KIND[kind]}{size * 8}"
        if name in ITEMSIZE and order != ">":
            return name, size
    return f"numpy:{descr}", size


#: How to find NaN/Inf without torch or float arithmetic, on the bits alone: an element is
#: non-finite when ``bits & mask >= limit`` (IEEE formats: the exponent all ones, whatever the
#: sign and mantissa), or, for the formats whose only NaN is one pattern and that have no Inf
#: (the fnuz float8s: 0x80), when ``bits == limit`` (``exact``). Integer compares run in SIMD for
#: every width; numpy's own float16 reduction is software, and its float32 ``isfinite`` needs a
#: boolean temporary. A complex number is two of its component floats.
NONFINITE_RULE: dict[str, tuple[str, int, int, bool]] = {
    "float64": ("<u8", 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000, False),
    "float32": ("<u4", 0x7FFF_FFFF, 0x7F80_0000, False),
    "float16": ("<u2", 0x7FFF, 0x7C00, False),
    "bfloat16": ("<u2", 0x7FFF, 0x7F80, False),
    "complex128": ("<u8", 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000, False),
    "complex64": ("<u4", 0x7FFF_FFFF, 0x7F80_0000, False),
    "complex32": ("<u2", 0x7FFF, 0x7C00, False),
    "float8_e5m2": ("u1", 0x7F, 0x7C, False),
    "float8_e4m3fn": ("u1", 0x7F, 0x7F, False),  # no Inf; NaN is S.1111.111
    "float8_e4m3fnuz": ("u1", 0xFF, 0x80, True),
    "float8_e5m2fnuz": ("u1", 0xFF, 0x80, True),
    "float8_e8m0fnu": ("u1", 0xFF, 0xFF, False),  # unsigned exponent only: 0xFF is NaN
}
