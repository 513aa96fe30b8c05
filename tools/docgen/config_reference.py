#!/usr/bin/python3
"""Writes docs/config_reference.md: every field of the configurations a
user writes — TableConfig (proto/tables.proto) and WorkerConfig
(config/worker_config.proto) with the messages they hold — with its type
and the comment the .proto gives it, default included.

    tools/docgen/config_reference.py            # writes the file
    tools/docgen/config_reference.py --check    # exit 1 if it is stale

The .proto files are read by protoc (--include_source_info keeps their
comments) and the descriptor set by Debian's python3-protobuf: no parsing
of our own. CI runs --check (tools/lint/check.sh).
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "docs" / "config_reference.md"
# (file, top-level message) in the order the page gives them.
SOURCES = [
    ("proto/tables.proto", "TableConfig"),
    ("config/worker_config.proto", "WorkerConfig"),
]

_TYPES = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64: "fixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32: "fixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
}


def _descriptors():
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        subprocess.run(
            ["/usr/bin/protoc", "--proto_path=.", "--include_imports",
             "--include_source_info", f"--descriptor_set_out={out}"] +
            [f for f, _ in SOURCES], cwd=ROOT, check=True)
        files = descriptor_pb2.FileDescriptorSet()
        files.ParseFromString(out.read_bytes())
    return {f.name: f for f in files.file}


def _comments(file):
    """Leading comments by descriptor path (a tuple of ints)."""
    return {tuple(loc.path): loc.leading_comments
            for loc in file.source_code_info.location
            if loc.leading_comments}


def _text(comment):
    return " ".join(line.strip() for line in comment.strip().splitlines())


class _Page:
    def __init__(self, files):
        self.files = files
        self.messages = {}  # full name -> (file, path, descriptor)
        self.enums = {}
        for file in files.values():
            for i, m in enumerate(file.message_type):
                self._index(file, f".{file.package}.{m.name}", (4, i), m)
            for i, e in enumerate(file.enum_type):
                self.enums[f".{file.package}.{e.name}"] = (file, (5, i), e)
        self.lines = []
        self.done = set()

    def _index(self, file, name, path, message):
        self.messages[name] = (file, path, message)
        for i, nested in enumerate(message.nested_type):
            self._index(file, f"{name}.{nested.name}", path + (3, i), nested)
        for i, enum in enumerate(message.enum_type):
            self.enums[f"{name}.{enum.name}"] = (file, path + (4, i), enum)

    def _type(self, field):
        if field.type_name:
            return field.type_name.split(".")[-1]
        return _TYPES[field.type]

    def message(self, full_name):
        if full_name in self.done:
            return
        self.done.add(full_name)
        file, path, message = self.messages[full_name]
        comments = _comments(file)
        short = full_name.split(".")[-1]
        self.lines += [f"## {short}", "",
                       f"`{full_name[1:]}`, in `{file.name}`.", ""]
        if path in comments:
            self.lines += [_text(comments[path]), ""]
        self.lines += ["| field | type | meaning and default |",
                       "|---|---|---|"]
        nested = []
        for i, field in enumerate(message.field):
            repeated = field.label == field.LABEL_REPEATED
            kind = ("repeated " if repeated else "") + self._type(field)
            text = _text(comments.get(path + (2, i), "")) or "—"
            self.lines.append(f"| `{field.name}` | {kind} | "
                              f"{text.replace('|', '/')} |")
            if field.type == field.TYPE_MESSAGE:
                nested.append(field.type_name)
            elif field.type == field.TYPE_ENUM:
                nested.append(field.type_name)
        self.lines.append("")
        for name in nested:
            if name in self.messages:
                self.message(name)
            else:
                self.enum(name)

    def enum(self, full_name):
        if full_name in self.done:
            return
        self.done.add(full_name)
        file, path, enum = self.enums[full_name]
        comments = _comments(file)
        self.lines += [f"### {full_name.split('.')[-1]} (enum)", "",
                       f"`{full_name[1:]}`.", ""]
        if path in comments:
            self.lines += [_text(comments[path]), ""]
        self.lines += ["| value | meaning |", "|---|---|"]
        for i, value in enumerate(enum.value):
            text = _text(comments.get(path + (2, i), "")) or "—"
            self.lines.append(f"| `{value.name}` ({value.number}) | {text} |")
        self.lines.append("")


def render():
    files = _descriptors()
    page = _Page(files)
    page.lines = [
        "# Configuration reference",
        "",
        "Generated by `tools/docgen/config_reference.py` from the comments",
        "of the .proto files; do not edit (CI fails when it is stale).",
        "Every field a table (`ps_server --tables`, `Client::CreateTable`,",
        "`embedps.Client.create_table`) and a training job",
        "(`ps_worker --config`) take, with its default: an unset field",
        "takes it. Configs are protobuf text format (deploy/local/*.txtpb).",
        "",
    ]
    for file_name, message in SOURCES:
        package = files[file_name].package
        page.message(f".{package}.{message}")
    return "\n".join(page.lines).rstrip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/config_reference.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print("docs/config_reference.md is stale: run "
                  "tools/docgen/config_reference.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
