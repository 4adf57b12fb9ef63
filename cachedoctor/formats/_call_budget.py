"""Budgets for the calls a pickle makes with allow-listed names, judged without making them.

The allow-list says *which* callables a cache pickle may name; this module says *how* it may
call them. Allowed names are enough to hurt a loader: ``bytearray(6_000_000_000)`` allocates
6 GB, 250 ``bytearray`` copies of one memoised 4 MiB value allocate 1 GB, ``_codecs.encode``
with ``punycode`` is quadratic, and ``torch.UntypedStorage(16, allocator=0x4141...)`` makes
torch call through a pointer the file chose. So the static walk hands every call it reaches
(REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST, and the call ``_rebuild_from_type_v2`` makes of its first
argument) to :meth:`CallBudget.call` with what it knows of the arguments: constants, the sizes
of bytes and containers, other calls' results. Each rule *counts* the bytes the real call would
allocate (it never allocates them), against one budget per file shared by every call, memo reuse
included. Past the budget, or past a size the rule bounds, is a resource bomb; a call the walk
cannot show bounded (a storage class called, a codec outside the linear set, a size it does not
know) is refused: the file is reported as unsafe-pickle, "cannot be shown safe".
"""

from __future__ import annotations

from collections.abc import Callable
from encodings import normalize_encoding
from encodings.aliases import aliases

from cachedoctor.formats._dtypes import ITEMSIZE, STORAGE_DTYPE, TORCH_ALIASES
from cachedoctor.formats._hash_flood import HashFlood
from cachedoctor.formats._pickle_opcodes import Bomb
from cachedoctor.formats._pickle_policy import _LAYOUTS, _QSCHEMES, _TENSOR_REBUILDS, Limits
from cachedoctor.formats._pickle_values import MADE, Blob, Box, Global, Made

#: Codecs whose encoder runs in linear time, as ``codecs.lookup`` names their modules, and the
#: most bytes one character can become under them.
_LINEAR_CODECS = {"utf_8": 4, "latin_1": 1, "ascii": 1}
#: Error handlers a loader may name, and how many bytes at most one character becomes under them.
_HANDLERS = {
    "strict": 1,
    "ignore": 1,
    "replace": 3,
    "surrogatepass": 1,
    "surrogateescape": 1,
    "backslashreplace": 10,
    "xmlcharrefreplace": 10,
    "namereplace": 100,
}


def codec_module(encoding: str) -> str:
    """The ``encodings`` module ``_codecs.encode`` would use for ``encoding``: CPython lowers the
    name, ``encodings.search_function`` normalises it and looks its alias up (``UTF8``, ``u8``,
    ``iso-8859-1`` and ``L1`` are all linear codecs)."""
    norm = normalize_encoding(encoding.lower())
    return aliases.get(norm) or aliases.get(norm.replace(".", "_")) or norm


def linear_codec(encoding: object) -> int | None:
    """Bytes per character at most for a linear codec, ``None`` for any other name."""
    if not isinstance(encoding, str):
        return None
    return _LINEAR_CODECS.get(codec_module(encoding))


_STORAGES = frozenset(
    {
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
        "torch.UntypedStorage",
        "torch.TypedStorage",
        "torch.storage._LegacyStorage",
        *(f"torch.{cls}" for cls in STORAGE_DTYPE),
        *(f"torch.cuda.{cls}" for cls in STORAGE_DTYPE),
    }
)
#: Allowed names that are values, not callables (dtypes, layouts, qschemes): calling one raises.
_VALUES = frozenset(
    {*(f"torch.{n}" for n in ITEMSIZE), *(f"torch.{n}" for n in TORCH_ALIASES)}
    | {f"torch.{n}" for n in _LAYOUTS}
    | {f"torch.{n}" for n in _QSCHEMES}
)
#: Rebuild functions that make views of storages already loaded: they allocate nothing sized
#: by their arguments (``_rebuild_qtensor`` does, and has a rule of its own).
_VIEWS = frozenset(f"torch._utils.{f}" for f in _TENSOR_REBUILDS if f != "_rebuild_qtensor") | {
    "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout",
}
_FROM_TYPE = "torch._tensor._rebuild_from_type_v2"
_ITEM = 64  # bytes a loader spends per item of a container it builds (entry, object, hash slot)
_MAX_NESTING = 16  # _rebuild_from_type_v2 calling _rebuild_from_type_v2...


def _size_of(value: object) -> int | None:
    """Items (or bytes) in a value the walk knows, ``None`` when it does not."""
    if isinstance(value, (str, tuple)):
        return len(value)
    if isinstance(value, Blob):
        return value.size
    if isinstance(value, Box):
        return len(value.items)
    return None


class CallBudget:
    """One file's allocation budget and hash-flood table, shared by every call it makes."""

    __slots__ = ("limits", "spent", "flood", "refuse", "_rules")

    def __init__(self, limits: Limits, refuse: Callable[[str], None]) -> None:
        self.limits = limits
        self.spent = 0
        self.flood = HashFlood(limits.hash_collisions, limits.opaque_keys)
        self.refuse = refuse  # records "cannot be shown safe: ..." for the verdict
        self._rules: dict[str, Callable[[str, tuple, Box | None], object]] = {
            "builtins.bytearray": self._bytes,
            "builtins.bytes": self._bytes,
            "_codecs.encode": self._encode,
            "builtins.set": self._collection,
            "builtins.frozenset": self._collection,
            "collections.OrderedDict": self._collection,
            "collections.Counter": self._collection,
            "torch.Size": self._collection,
            "builtins.complex": self._complex,
            "torch.device": self._text_args,
            "torch.Tensor": self._tensor,
            "torch._utils._rebuild_qtensor": self._qtensor,
        }

    def spend(self, nbytes: int, what: str) -> None:
        self.spent += nbytes
        if nbytes > self.limits.call_bytes or self.spent > self.limits.call_bytes:
            raise Bomb(
                f"{what} would allocate {nbytes:,} bytes, {self.spent:,} with the calls before it "
                f"(limit {self.limits.call_bytes:,} for all the calls of a file)"
            )

    def key(self, key: object) -> None:
        """A key a loader inserts; a frozenset's hash mixes its items' hashes, so it is counted
        with the call results, as a key whose hash the walk does not compute."""
        self.flood.key(key, not isinstance(key, Made) and not (isinstance(key, Box) and key.kind == "frozenset"))

    def call(self, fn: object, args: object, kwargs: Box | None = None, depth: int = 0) -> object:
        """What the loader's call ``fn(*args, **kwargs)`` leaves on the stack, counted."""
        if not isinstance(fn, Global):
            return MADE  # a constant, container or call result: none of them is callable
        name = fn.name
        if name in _STORAGES:
            detail = _kwargs_named(kwargs)
            self.refuse(
                f"{name} called{detail} (cannot be shown safe: torch.save never calls a storage "
                "class; torch would allocate the size it is given or call through an allocator "
                "pointer the file chose)"
            )
            return MADE
        if kwargs is not None and kwargs.items:
            # Only NEWOBJ_EX passes keywords, and torch.save never writes one: torch.Tensor's
            # keyword-only ``cdata`` makes a tensor of a raw pointer, ``device`` allocates on a GPU.
            self.refuse(f"{name} called{_kwargs_named(kwargs)} (cannot be shown safe: torch.save never passes them)")
            return MADE
        if name in _VALUES or name in _VIEWS:
            return MADE  # a dtype or layout is not callable; a rebuild makes a view
        rule = self._rules.get(name)
        if rule is None and name != _FROM_TYPE:
            return MADE  # outside the allow-list: the walk already reports the name itself
        if not isinstance(args, tuple):
            return MADE  # the loader raises: a call's arguments must be a tuple
        if depth > _MAX_NESTING:
            self.refuse(f"{name} nested more than {_MAX_NESTING} deep (cannot be shown safe)")
            return MADE
        if name == _FROM_TYPE:  # _rebuild_from_type_v2(func, new_type, args, state) calls func(*args)
            return self.call(args[0], args[2], None, depth + 1) if len(args) >= 3 else MADE
        assert rule is not None
        return rule(name, args, kwargs)

    # --- the rules ----------------------------------------------------------------------

    def _bytes(self, name: str, args: tuple, kwargs: Box | None) -> object:
        """``bytearray(n)``/``bytes(n)`` allocate n bytes; from a str they encode it; from bytes
        or a container they copy it."""
        if not args:
            return Blob(0)
        source = args[0]
        if isinstance(source, int):  # bool included
            zeros = max(int(source), 0)
            self.spend(zeros, f"{name}({source})")
            return Blob(zeros)
        if isinstance(source, str):
            if len(args) < 2:
                return MADE  # TypeError: string argument without an encoding
            encoding = args[1]
            return self._encode_str(name, source, encoding, args[2] if len(args) > 2 else "strict")
        size = _size_of(source)
        if size is None:
            if isinstance(source, (float, complex, Global)):
                return MADE  # TypeError in the loader
            self.refuse(f"{name}() of a value whose size the walk cannot know (cannot be shown safe)")
            return MADE
        blob = isinstance(source, Blob)
        self.spend(size if blob else size * 8, f"{name}() of {size:,} {'bytes' if blob else 'items'}")
        return Blob(size)

    def _encode(self, name: str, args: tuple, kwargs: Box | None) -> object:
        if not args:
            return MADE
        encoding = args[1] if len(args) > 1 else "utf-8"
        errors = args[2] if len(args) > 2 else "strict"
        if not isinstance(args[0], str):
            if linear_codec(encoding) is None:  # bytes-to-bytes codecs (zlib, base64...) take bytes
                self.refuse(f"_codecs.encode with codec {str(encoding)[:40]!r} (cannot be shown safe)")
            return MADE  # a text codec raises on anything but a str
        return self._encode_str(name, args[0], encoding, errors)

    def _encode_str(self, name: str, text: str, encoding: object, errors: object) -> object:
        per_char = linear_codec(encoding)
        if per_char is None:
            self.refuse(
                f"{name} with codec {str(encoding)[:40]!r} (cannot be shown safe: not one of the "
                "codecs known to encode in linear time: utf-8, latin-1, ascii)"
            )
            return MADE
        expand = _HANDLERS.get(errors) if isinstance(errors, str) else None
        if expand is None:
            self.refuse(f"{name} with error handler {str(errors)[:40]!r} (cannot be shown safe)")
            return MADE
        size = len(text) * per_char * expand
        self.spend(size, f"{name} of {len(text):,} characters")
        return Blob(size)

    def _collection(self, name: str, args: tuple, kwargs: Box | None) -> object:
        """set, frozenset, OrderedDict, Counter, torch.Size: one entry per item of the argument,
        each a key the loader hashes (a pair's first item for the dicts)."""
        if not args:
            return Box("dict" if name.startswith("collections.") else name.rpartition(".")[2])
        source = args[0]
        size = _size_of(source)
        if size is None:
            if source is None or isinstance(source, (int, float, complex, Global)):
                return MADE  # not iterable: the loader raises
            self.refuse(f"{name}() of a value the walk cannot follow (cannot be shown safe)")
            return MADE
        self.spend(size * _ITEM, f"{name}() of {size:,} items")
        if isinstance(source, (tuple, Box)):
            for item in source if isinstance(source, tuple) else source.items:
                self.key(item)
                if isinstance(item, tuple) and len(item) == 2:
                    self.key(item[0])
        if name == "torch.Size" and isinstance(source, tuple):
            return source  # a tuple subclass: hashes as the tuple does
        if name == "torch.Size":
            return MADE
        return Box("dict" if name.startswith("collections.") else name.rpartition(".")[2])

    def _complex(self, name: str, args: tuple, kwargs: Box | None) -> object:
        if all(isinstance(a, (int, float)) for a in args[:2]) and len(args) <= 2:
            try:
                return complex(*args)  # its hash is fixed: the flood check needs the value
            except (OverflowError, TypeError, ValueError):
                return MADE
        return self._text_args(name, args, kwargs)

    def _text_args(self, name: str, args: tuple, kwargs: Box | None) -> object:
        """torch.device('cuda:0'), complex('1+2j'): parsing is linear in the text."""
        self.spend(sum(len(a) for a in args if isinstance(a, str)), name)
        return MADE

    def _tensor(self, name: str, args: tuple, kwargs: Box | None) -> object:
        """``torch.Tensor(*sizes)`` allocates their product; ``torch.Tensor(sequence)`` copies it."""
        if args and all(isinstance(a, int) for a in args):
            self.spend(_product(args, self.limits.call_bytes) * 8, f"{name}{args!r:.60}")
            return MADE
        if len(args) == 1:
            size = _size_of(args[0])
            if size is not None:
                self.spend(size * 8, f"{name}() of {size:,} items")
                return MADE
            if args[0] is None or isinstance(args[0], Made):
                return MADE  # a view of a storage or tensor already loaded
        if not args:
            return MADE
        self.refuse(f"{name} called with arguments the walk cannot size (cannot be shown safe)")
        return MADE

    def _qtensor(self, name: str, args: tuple, kwargs: Box | None) -> object:
        """``_rebuild_qtensor`` allocates a quantized tensor of ``size`` before viewing the storage."""
        size = args[2] if len(args) > 2 else None
        if not isinstance(size, tuple) or not all(isinstance(s, int) for s in size):
            self.refuse(f"{name} with a size the walk cannot read (cannot be shown safe)")
            return MADE
        self.spend(_product(size, self.limits.call_bytes) * 4, f"{name} of size {size!r:.60}")
        return MADE


def _kwargs_named(kwargs: Box | None) -> str:
    if kwargs is None:
        return ""
    names = [k for k in kwargs.items[::2] if isinstance(k, str)][:3]
    return f" with keyword arguments {', '.join(n[:20] for n in names)}" if names else ""


def _product(values: tuple, cap: int) -> int:
    """The product of ``values`` (negatives as 0), stopping once it passes ``cap``."""
    total = 1
    for v in values:
        total *= max(int(v), 0)
        if total > cap:
            return total
    return total
