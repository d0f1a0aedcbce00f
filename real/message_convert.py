"""Field-by-field conversion between our IDL messages (real/messages.py) and any other ROS 2 message
implementation with the same field names: rclpy's generated classes, `rosbags` dataclasses.

Sequences are built by the caller's factories because implementations disagree on them: rclpy wants
array.array for float64[] / uint8[], rosbags numpy arrays.
"""

from __future__ import annotations

import typing
from functools import lru_cache

import numpy as np
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import sequence as idl_sequence

_FLOATS = {"float64", "float32"}


@lru_cache(maxsize=None)
def _fields(cls) -> tuple[tuple[str, str, object], ...]:
    """(name, kind, subtype) per field: struct | struct_seq | float_seq | byte_seq (uint8[]) | int_seq | str_seq
    | bytes | float | int | str | bool."""
    out = []
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        if isinstance(hint, type) and issubclass(hint, IdlStruct):
            out.append((name, "struct", hint))
            continue
        if hint is bytes:
            out.append((name, "bytes", None))
            continue
        if hint in (str, bool, float, int):
            out.append((name, hint.__name__, None))
            continue
        meta = typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ()
        seq = next((m for m in meta if isinstance(m, idl_sequence)), None)
        if seq is not None:
            sub = seq.subtype
            if isinstance(sub, type) and issubclass(sub, IdlStruct):
                out.append((name, "struct_seq", sub))
            elif sub is str:
                out.append((name, "str_seq", None))
            else:
                sub_name = typing.get_args(sub)[1] if typing.get_origin(sub) is typing.Annotated else ""
                kind = "float_seq" if sub_name in _FLOATS or sub is float else "byte_seq" if sub_name == "uint8" else "int_seq"
                out.append((name, kind, None))
            continue
        prim = meta[0] if meta else ""
        out.append((name, "float" if prim in _FLOATS else "int", None))
    return tuple(out)


def convert_to(msg, resolve: typing.Callable[[type], type], float_seq, byte_seq):
    """`msg` (an IDL dataclass) as an instance of the other implementation's class `resolve(type(msg))`.

    float_seq(list) / byte_seq(bytes) build that implementation's sequence values (rclpy: array.array;
    rosbags: numpy arrays)."""
    kw = {}
    for name, kind, sub in _fields(type(msg)):
        v = getattr(msg, name)
        if kind == "struct":
            v = convert_to(v, resolve, float_seq, byte_seq)
        elif kind == "struct_seq":
            v = [convert_to(x, resolve, float_seq, byte_seq) for x in v]
        elif kind == "float_seq":
            v = float_seq(v)
        elif kind in ("bytes", "byte_seq"):
            v = byte_seq(bytes(v))
        elif kind == "str_seq":
            v = list(v)
        kw[name] = v
    return resolve(type(msg))(**kw)


def convert_from(other, cls: type):
    """An IDL dataclass `cls` with the field values of `other` (a message with ROS field names)."""
    kw = {}
    for name, kind, sub in _fields(cls):
        v = getattr(other, name)
        if kind == "struct":
            v = convert_from(v, sub)
        elif kind == "struct_seq":
            v = [convert_from(x, sub) for x in v]
        elif kind == "float_seq":
            v = [float(x) for x in v]
        elif kind == "byte_seq":
            v = np.asarray(v, dtype=np.uint8).tolist()
        elif kind == "int_seq":
            v = [int(x) for x in v]
        elif kind == "str_seq":
            v = [str(x) for x in v]
        elif kind == "bytes":
            v = bytes(np.asarray(v, dtype=np.uint8)) if not isinstance(v, (bytes, bytearray)) else bytes(v)
        elif kind == "float":
            v = float(v)
        elif kind == "int":
            v = int(v)
        elif kind == "bool":
            v = bool(v)
        elif kind == "str":
            v = str(v)
        kw[name] = v
    return cls(**kw)


def rosbags_float_seq(values):
    return np.asarray(values, dtype=np.float64)


def rosbags_byte_seq(data: bytes):
    return np.frombuffer(data, dtype=np.uint8).copy()


def to_rosbags(msg, typestore):
    """`msg` as a rosbags message of `typestore` (e.g. get_typestore(Stores.ROS2_HUMBLE))."""
    from robot_rl.real.messages import ros_type_name

    return convert_to(msg, lambda cls: typestore.types[ros_type_name(cls)], rosbags_float_seq, rosbags_byte_seq)
