"""The values the static pickle walk (``_pickle_scan.py``) follows through opcodes with a fixed or
MARK-delimited stack effect: the calls they make (counted by :class:`CallBudget`), the tuples,
lists, dicts and sets they build (their keys checked for hash floods), and a BUILD aimed at an
imported class or function. Kept apart from the walk's dispatch loop, which stays one page.
"""

from __future__ import annotations

from cachedoctor.formats._call_budget import CallBudget
from cachedoctor.formats._pickle_opcodes import _MARKED_ONTO
from cachedoctor.formats._pickle_values import Box, Global


def fixed_value(op: int, stack: list[object], pops: int, budget: CallBudget) -> object:
    """The value a fixed-effect opcode leaves (calls counted), before its items are popped."""
    if op == 0x52 or op == 0x81:  # REDUCE, NEWOBJ: callable, args
        return budget.call(stack[-2], stack[-1])
    if op == 0x92:  # NEWOBJ_EX: class, args, kwargs
        kwargs = stack[-1]
        return budget.call(stack[-3], stack[-2], kwargs if isinstance(kwargs, Box) else None)
    if 0x85 <= op <= 0x87:  # TUPLE1..3
        return tuple(stack[-pops:])
    if op == 0x61:  # APPEND
        target = stack[-2]
        if isinstance(target, Box):
            target.items.append(stack[-1])
    elif op == 0x73:  # SETITEM: dict, key, value
        budget.key(stack[-2])
        target = stack[-3]
        if isinstance(target, Box):
            target.items += stack[-2:]
    elif op == 0x62 and isinstance(stack[-2], Global):  # BUILD on a class or function
        budget.refuse(
            f"BUILD on {stack[-2].name} (cannot be shown safe: it sets attributes of an object "
            "the loader imported, for every later use in the process)"
        )
    return None


def marked_value(op: int, stack: list[object], at: int, budget: CallBudget) -> object:
    """The value a MARK-delimited opcode leaves, keys checked, before its items are popped."""
    if op == 0x74:  # TUPLE
        return tuple(stack[at:])
    if op == 0x6F:  # OBJ
        return budget.call(stack[at], tuple(stack[at + 1 :]))
    items = stack[at:]
    if op == 0x75 or op == 0x64:  # SETITEMS, DICT: keys alternate with values
        for key in items[::2]:
            budget.key(key)
    elif op == 0x90 or op == 0x91:  # ADDITEMS, FROZENSET
        for key in items:
            budget.key(key)
    if op in _MARKED_ONTO:  # APPENDS, SETITEMS, ADDITEMS onto the object below the mark
        target = stack[at - 1]
        if isinstance(target, Box):
            target.items += items
        return None
    return Box("list" if op == 0x6C else "dict" if op == 0x64 else "frozenset", items)
