"""What the static pickle walk allows, and how much: the allow-list of globals a torch.save,
numpy or safetensors-adjacent cache file may name, and the resource limits past which a pickle
is a bomb. Kept apart from the walk (``_pickle_scan.py``) so that the policy reads as one page.
"""

from __future__ import annotations

import _compat_pickle
from dataclasses import dataclass

from cachedoctor.formats._dtypes import ITEMSIZE, STORAGE_DTYPE, TORCH_ALIASES


@dataclass(frozen=True, slots=True)
class Limits:
    pickle_bytes: int = 16 * 1024 * 1024
    opcodes: int = 500_000
    memo: int = 65_536  # memo writes; also the largest memo index accepted
    stack: int = 50_000
    marks: int = 1_000
    string: int = 4 * 1024 * 1024  # one argument (str, bytes, long, text line)
    #: Bytes all the calls of one file would allocate, memo reuse counted at each use: four
    #: times the largest pickle (a str of it encoded to UTF-8). 250 copies of 4 MiB are 1 GB.
    call_bytes: int = 64 * 1024 * 1024
    #: Distinct dict or set keys sharing one hash (ints, floats, tuples: their hashes are not
    #: salted); a cache file has none, a hash flood has thousands.
    hash_collisions: int = 64
    #: Dict or set keys that are results of calls (their hash not computable by the walk).
    opaque_keys: int = 65_536


LIMITS = Limits()

#: What torch.save legitimately writes (and torch's own weights_only unpickler admits), spelled
#: as the unpickler resolves it: protocol 0-2 names pass through ``_compat_pickle`` first, so
#: ``__builtin__.set`` is ``builtins.set``.
_TENSOR_REBUILDS = (
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_cpu_tensor",
    "_rebuild_device_tensor_from_numpy",
)
_QSCHEMES = (
    "per_tensor_affine",
    "per_channel_affine",
    "per_tensor_symmetric",
    "per_channel_symmetric",
    "per_channel_affine_float_qparams",
)
_LAYOUTS = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged")


def _allowed() -> frozenset[str]:
    names = {
        "collections.OrderedDict",
        "collections.Counter",
        "builtins.set",
        "builtins.frozenset",
        "builtins.complex",
        "builtins.bytearray",
        "builtins.bytes",
        "_codecs.encode",
        "torch.Size",
        "torch.device",
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch._tensor._rebuild_from_type_v2",
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
        "torch.UntypedStorage",
        "torch.TypedStorage",
        "torch.storage._LegacyStorage",
    }
    names.update(f"torch._utils.{f}" for f in _TENSOR_REBUILDS)
    names.update(f"torch.{layout}" for layout in _LAYOUTS)
    names.update(f"torch.{scheme}" for scheme in _QSCHEMES)
    for cls in STORAGE_DTYPE:
        names.add(f"torch.{cls}")
        names.add(f"torch.cuda.{cls}")
    names.update(f"torch.{name}" for name in ITEMSIZE)
    names.update(f"torch.{alias}" for alias in TORCH_ALIASES)
    return frozenset(names)


ALLOWED = _allowed()

#: Shown instead of a global's name when the name is computed while loading.
DYNAMIC = "<a global whose name is computed at load time>"
EXTENSION = "<a global from the copyreg extension registry (EXT opcode)>"


#: Below this protocol the unpickler maps Python 2 names (``fix_imports``, on by default): CPython's
#: ``find_class`` tests ``self.proto < 3``, where ``proto`` is the last PROTO opcode read (0 when
#: the pickle has none). From protocol 3 on, ``UserDict.OrderedDict`` imports a module ``UserDict``.
PY2_NAMES_BELOW = 3


def canonical(module: str, name: str, proto: int = 0) -> str:
    """``module.name`` as the unpickler resolves it at protocol ``proto``: Python 2 names are
    mapped (``__builtin__.set`` is ``builtins.set``) only below protocol 3, as CPython does."""
    if proto >= PY2_NAMES_BELOW:
        return f"{module}.{name}"
    key = (module, name)
    if key in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[key]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"
