"""The C types an entry point's arguments may have, and their numpy dtype names: the one table.

Dependency-free, so the contained harness can import it without pydantic.
"""

C_TYPES = {
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "int32_t": "int32",
    "int64_t": "int64",
    "long": "int64",
    "size_t": "uint64",
    "uint8_t": "uint8",
    "int8_t": "int8",
    "uint32_t": "uint32",
    "int16_t": "int16",
    "uint16_t": "uint16",
}
