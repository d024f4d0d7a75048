"""Step over one Java-serialized object (``ObjectOutputStream``), checking its grammar to the last byte.

``_metadata`` since format version 4 ends with the checkpoint's ``CheckpointProperties`` written so.
They hold no offsets, but a file cut or garbled there is still a damaged file, and the grammar (Java
Object Serialization Specification, section 6.4) is the only way to know where they end. Class
descriptors are kept in the handle table because an object's field layout comes from its descriptor,
which later objects may reference by handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.flink.binary import DataInput

_STREAM_MAGIC: Final = 0xACED
_STREAM_VERSION: Final = 5
_TC_NULL: Final = 0x70
_TC_REFERENCE: Final = 0x71
_TC_CLASSDESC: Final = 0x72
_TC_OBJECT: Final = 0x73
_TC_STRING: Final = 0x74
_TC_ARRAY: Final = 0x75
_TC_CLASS: Final = 0x76
_TC_BLOCKDATA: Final = 0x77
_TC_ENDBLOCKDATA: Final = 0x78
_TC_BLOCKDATALONG: Final = 0x7A
_TC_LONGSTRING: Final = 0x7C
_TC_ENUM: Final = 0x7E
_BASE_WIRE_HANDLE: Final = 0x7E0000
_SC_WRITE_METHOD: Final = 0x01
_SC_SERIALIZABLE: Final = 0x02
_SC_EXTERNALIZABLE: Final = 0x04
_SC_BLOCK_DATA: Final = 0x08
_PRIMITIVE_SIZES: Final = {"B": 1, "C": 2, "D": 8, "F": 4, "I": 4, "J": 8, "S": 2, "Z": 1}
_MAX_DEPTH: Final = 64


@dataclass
class _ClassDesc:
    name: str
    flags: int
    fields: list[tuple[str, str]]  # (type code, field name)
    superclass: _ClassDesc | None


class _Reader:
    def __init__(self, inp: DataInput) -> None:
        self.inp = inp
        self.handles: list[_ClassDesc | None] = []

    def new_handle(self, value: _ClassDesc | None = None) -> None:
        self.handles.append(value)

    def handle(self, what: str) -> _ClassDesc | None:
        at = self.inp.pos
        index = self.inp.i32(what) - _BASE_WIRE_HANDLE
        if not 0 <= index < len(self.handles):
            raise self.inp.fail(f"Java serialization: {what} {index} is not a known handle", at)
        return self.handles[index]

    def content(self, depth: int) -> _ClassDesc | None:
        """One object (or block data); a class descriptor is returned, since fields need it."""
        inp = self.inp
        if depth > _MAX_DEPTH:
            raise inp.fail("Java serialization nested too deep")
        at = inp.pos
        tc = inp.u8("Java serialization type code")
        if tc == _TC_NULL:
            return None
        if tc == _TC_REFERENCE:
            return self.handle("reference")
        if tc == _TC_CLASSDESC:
            return self.class_desc_body(depth)
        if tc == _TC_STRING:
            inp.utf("Java string")
            self.new_handle()
            return None
        if tc == _TC_LONGSTRING:
            n = inp.i64("Java long string length")
            inp.skip(n if 0 <= n <= inp.remaining() else -1, "Java long string")
            self.new_handle()
            return None
        if tc == _TC_OBJECT:
            self.object_body(depth)
            return None
        if tc == _TC_ENUM:
            self.class_desc(depth)
            self.new_handle()
            self.string(depth)
            return None
        if tc == _TC_ARRAY:
            self.array_body(depth)
            return None
        if tc == _TC_CLASS:
            self.class_desc(depth)
            self.new_handle()
            return None
        if tc == _TC_BLOCKDATA:
            inp.skip(inp.u8("block data length"), "block data")
            return None
        if tc == _TC_BLOCKDATALONG:
            inp.skip(inp.count("block data length"), "block data")
            return None
        raise inp.fail(f"unsupported Java serialization type code {tc:#04x}", at)

    def string(self, depth: int) -> None:
        at = self.inp.pos
        tc = self.inp.u8("Java string type code")
        if tc == _TC_REFERENCE:
            self.handle("string reference")
        elif tc in (_TC_STRING, _TC_LONGSTRING):
            self.inp.pos = at
            self.content(depth + 1)
        else:
            raise self.inp.fail(f"expected a Java string, found type code {tc:#04x}", at)

    def class_desc(self, depth: int) -> _ClassDesc | None:
        at = self.inp.pos
        tc = self.inp.u8("Java class descriptor")
        if tc == _TC_NULL:
            return None
        if tc == _TC_REFERENCE:
            return self.handle("class descriptor reference")
        if tc == _TC_CLASSDESC:
            return self.class_desc_body(depth)
        raise self.inp.fail(f"expected a Java class descriptor, found type code {tc:#04x}", at)

    def class_desc_body(self, depth: int) -> _ClassDesc:
        inp = self.inp
        name = inp.utf("Java class name")
        inp.i64("serialVersionUID")
        desc = _ClassDesc(name, 0, [], None)
        self.new_handle(desc)
        desc.flags = inp.u8("Java class flags")
        at = inp.pos
        n_fields = inp.i16("Java field count")
        if n_fields < 0:
            raise inp.fail(f"Java field count {n_fields}", at)
        for _ in range(n_fields):
            at = inp.pos
            code = chr(inp.u8("Java field type code"))
            field_name = inp.utf("Java field name")
            if code in ("L", "["):
                self.string(depth)
            elif code not in _PRIMITIVE_SIZES:
                raise inp.fail(f"unknown Java field type code {code!r}", at)
            desc.fields.append((code, field_name))
        self.annotations(depth)
        desc.superclass = self.class_desc(depth + 1)
        return desc

    def annotations(self, depth: int) -> None:
        while True:
            at = self.inp.pos
            if self.inp.u8("Java annotation") == _TC_ENDBLOCKDATA:
                return
            self.inp.pos = at
            self.content(depth + 1)

    def object_body(self, depth: int) -> None:
        desc = self.class_desc(depth)
        if desc is None:
            raise self.inp.fail("Java object without a class descriptor")
        self.new_handle()
        chain = []
        cursor: _ClassDesc | None = desc
        while cursor is not None:
            chain.append(cursor)
            cursor = cursor.superclass
            if len(chain) > _MAX_DEPTH:
                raise self.inp.fail("Java class hierarchy too deep")
        for cls in reversed(chain):  # superclass data first
            if cls.flags & _SC_EXTERNALIZABLE:
                if not cls.flags & _SC_BLOCK_DATA:
                    raise self.inp.fail(f"externalizable {cls.name} in the old protocol")
                self.annotations(depth)
                continue
            if not cls.flags & _SC_SERIALIZABLE:
                raise self.inp.fail(f"Java class {cls.name} is neither serializable nor externalizable")
            for code, _ in cls.fields:
                self.value(code, depth)
            if cls.flags & _SC_WRITE_METHOD:
                self.annotations(depth)

    def array_body(self, depth: int) -> None:
        desc = self.class_desc(depth)
        if desc is None or not desc.name.startswith("[") or len(desc.name) < 2:
            raise self.inp.fail("Java array without an array class descriptor")
        self.new_handle()
        code = desc.name[1]
        n = self.inp.count("Java array length")
        if code in _PRIMITIVE_SIZES:
            self.inp.skip(n * _PRIMITIVE_SIZES[code], "Java array")
            return
        for _ in range(n):
            self.content(depth + 1)

    def value(self, code: str, depth: int) -> None:
        if code in _PRIMITIVE_SIZES:
            self.inp.skip(_PRIMITIVE_SIZES[code], "Java field value")
        else:
            self.content(depth + 1)


def skip_java_object(inp: DataInput) -> None:
    """Read the stream header and one object; raise ``FlinkStateError`` if the bytes are no such thing."""
    at = inp.pos
    magic = inp.raw(min(inp.remaining(), 2), "Java serialization magic")
    if magic != _STREAM_MAGIC.to_bytes(2, "big"):
        raise inp.fail("not Java-serialized (no stream magic)", at)
    version = inp.i16("Java serialization version")
    if version != _STREAM_VERSION:
        raise inp.fail(f"unknown Java serialization version {version}", at + 2)
    _Reader(inp).content(0)
