"""Turns text files into a byte-level token file: uint32 little-endian, ids 0..255.

    python samples/make_tokens.py -o corpus.u32 [FILES...]

With no FILES, reads the license texts every Debian system ships
(/usr/share/common-licenses/*, sorted by name, symlinks skipped so each text
counts once), which makes the default corpus the same on every machine.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path("/usr/share/common-licenses")


def default_files():
    if not DEFAULT_DIR.is_dir():
        sys.exit(f"error: {DEFAULT_DIR} does not exist; name the text files to read")
    return sorted(p for p in DEFAULT_DIR.iterdir() if p.is_file() and not p.is_symlink())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", required=True, help="token file to write")
    p.add_argument("files", nargs="*", type=Path, help=f"text files (default: {DEFAULT_DIR}/*)")
    args = p.parse_args()
    data = bytearray()
    for f in args.files or default_files():
        try:
            data += f.read_bytes()
        except OSError as e:
            sys.exit(f"error: cannot read {f} ({e.strerror})")
    tmp = args.output + ".tmp"
    np.frombuffer(bytes(data), dtype=np.uint8).astype("<u4").tofile(tmp)
    os.replace(tmp, args.output)
    print(f"{len(data)} tokens -> {args.output}")


if __name__ == "__main__":
    main()
