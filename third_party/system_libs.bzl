"""Repository rule that exposes Debian's system libraries to Bazel.

Each library becomes a `cc_library` with the link flags and defines that
`pkg-config` reports on this machine, so that upgrades of Debian's packages
(which add or drop abseil's many small libraries) need no edits here.
Headers come from /usr/include, which the auto-configured toolchain already
searches. A library that pkg-config does not know is linked by name.
"""

def _flags(rctx, pkg_config, kind, modules):
    result = rctx.execute([pkg_config, kind] + modules)
    if result.return_code != 0:
        fail(("pkg-config {} {} failed: {}\n" +
              "Run deploy/setup.sh to install the Debian -dev packages.").format(
            kind,
            " ".join(modules),
            result.stderr.strip(),
        ))
    return [f for f in result.stdout.strip().split(" ") if f]

def _system_libraries_impl(rctx):
    pkg_config = rctx.which("pkg-config")
    if not pkg_config:
        fail("pkg-config not found. Run deploy/setup.sh.")
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, modules in rctx.attr.pkg_config.items():
        linkopts = _flags(rctx, pkg_config, "--libs", modules)
        defines = [f[2:] for f in _flags(rctx, pkg_config, "--cflags", modules) if f.startswith("-D")]
        lines.append("cc_library(name = {}, linkopts = {}, defines = {})".format(
            repr(name),
            repr(linkopts),
            repr(defines),
        ))
    for name, linkopts in rctx.attr.plain.items():
        lines.append("cc_library(name = {}, linkopts = {})".format(repr(name), repr(linkopts)))
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))
    rctx.file("BUILD.bazel", "\n".join(lines) + "\n")

system_libraries = repository_rule(
    implementation = _system_libraries_impl,
    attrs = {
        "pkg_config": attr.string_list_dict(
            doc = "target name -> pkg-config modules whose --libs/--cflags it carries",
        ),
        "plain": attr.string_list_dict(
            doc = "target name -> link flags, for libraries without a .pc file",
        ),
    },
    local = True,
)
