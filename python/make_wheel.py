"""Writes the embedps wheel from the built package tree (bazel-bin/python/site).

A wheel is a zip of the package and a .dist-info directory (METADATA,
WHEEL, RECORD with a sha256 of every file): PEP 427. Used by
`bazel build //python:wheel`.
"""

import argparse
import base64
import hashlib
import os
import zipfile

METADATA = """Metadata-Version: 2.1
Name: embedps
Version: {version}
Summary: Client of embedps parameter servers: sparse embedding tables for PyTorch training and serving
Requires-Python: ==3.11.*
Requires-Dist: numpy
Provides-Extra: torch
Requires-Dist: torch; extra == "torch"

The C++ core (_embedps) needs Debian 12's shared libraries of gRPC,
protobuf and abseil (libgrpc++1.51, libprotobuf32, libabsl20220623): the
same ones ps_server uses.
"""

WHEEL = """Wheel-Version: 1.0
Generator: embedps make_wheel.py
Root-Is-Purelib: false
Tag: cp311-cp311-linux_x86_64
"""


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{name},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--site", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    args = parser.parse_args()

    files = {}
    for root, _, names in os.walk(os.path.join(args.site, "embedps")):
        for name in sorted(names):
            path = os.path.join(root, name)
            arcname = os.path.relpath(path, args.site)
            with open(path, "rb") as f:
                files[arcname] = f.read()
    info = f"embedps-{args.version}.dist-info"
    files[f"{info}/METADATA"] = METADATA.format(version=args.version).encode()
    files[f"{info}/WHEEL"] = WHEEL.encode()
    files[f"{info}/top_level.txt"] = b"embedps\n"
    record = [record_line(name, data) for name, data in sorted(files.items())]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()

    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)


if __name__ == "__main__":
    main()
