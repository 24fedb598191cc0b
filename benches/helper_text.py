"""The helper text the MCP benches write: printable lines of 80 bytes (a
random 79-character line, rotated at random), cut to `size` bytes."""
import random

def text_bytes(size, seed):
    rng = random.Random(seed)
    line = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(79)) + b"\n"
    out = bytearray()
    while len(out) < size:
        out += line[rng.randrange(40):] + line[: rng.randrange(40)]
    return bytes(out[:size])
