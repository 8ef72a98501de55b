#!/usr/bin/env bash
# deploy/deb/build.sh: the Debian packages dyncc-edge and dyncc-central (`make deb`), built from
# the repository with dpkg-buildpackage and debhelper (debian/).  Installs what the build needs
# when missing (apt_install_no_start, deploy/lib.sh: debhelper, python3.11-venv, clang,
# libbpf-dev, linux-libc-dev, lintian), copies the repository's files (tracked and new, not
# ignored) to a clean source tree under $OUT/src, writes its debian/changelog for $VERSION and
# builds both binary packages into $OUT.  Reaches PyPI (the packages' own Python environments);
# downloads are cached in $DYNCC_CACHE/pip.  Prints each package's size and the build's time.
#
#   DYNCC_DEB_OUT       where the .deb files go                 [build/deb]
#   DYNCC_DEB_VERSION   the Debian version                      [pyproject version + "-1"]
#   DYNCC_DEB_COMPRESS  dpkg-deb's compressor options           [-Zgzip -z6: lintian of Debian 12 refuses zstd]
#   DYNCC_DEB_LINTIAN   1: run lintian on both packages after   [0]
#   `build.sh deps` only installs the build dependencies (make deps, as root)
#   PY                  the project venv's python, whose `pip freeze` pins the packaged versions
#                       [.venv/bin/python; absent: unpinned]
set -euo pipefail
_dyncc_tag=deb
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$DYNCC_REPO"

OUT=$(realpath -m "${DYNCC_DEB_OUT:-build/deb}")
PY=${PY:-.venv/bin/python}
project_version=$(/usr/bin/python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
VERSION=${DYNCC_DEB_VERSION:-$project_version-1}
BUILD_DEPS=(debhelper dpkg-dev python3.11-venv clang libbpf-dev linux-libc-dev lintian)

missing=()
for pkg in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || die "missing build dependencies (install them as root): ${missing[*]}"
    log "installing the build dependencies: ${missing[*]}"
    apt_install_no_start "${missing[@]}"
fi
if [[ ${1:-} == deps ]]; then log "build dependencies installed"; exit 0; fi

started=$(now_ms)
src=$OUT/src
rm -rf "$src" "$OUT"/dyncc*_"$VERSION"_*.deb "$OUT"/dyncc_"$VERSION"_*
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf - | tar -xf - -C "$src"
cat >"$src/debian/changelog" <<CHANGELOG
dyncc ($VERSION) unstable; urgency=medium

  * Built from the repository by deploy/deb/build.sh (dyncc $project_version).

 -- dyncc developers <dyncc@example.org>  $(date -R)
CHANGELOG

export DYNCC_DEB_COMPRESS=${DYNCC_DEB_COMPRESS:--Zgzip -z6}
export PIP_CACHE_DIR=$DYNCC_CACHE/pip
if [[ -x $PY ]]; then
    "$PY" -m pip freeze --exclude-editable --disable-pip-version-check | grep -E '^[A-Za-z0-9._-]+==' \
        >"$OUT/constraints.txt"
    export DYNCC_DEB_CONSTRAINTS=$OUT/constraints.txt
else
    log "no $PY: the packaged Python libraries are the newest that pyproject.toml allows"
    unset DYNCC_DEB_CONSTRAINTS
fi
log "building dyncc-edge and dyncc-central $VERSION in $src"
(cd "$src" && dpkg-buildpackage -b -uc -us --no-sign >"$OUT/build.log" 2>&1) \
    || { tail -n 40 "$OUT/build.log" >&2; die "dpkg-buildpackage failed (whole log: $OUT/build.log)"; }
took=$(( $(now_ms) - started ))
for deb in "$OUT"/dyncc-edge_"$VERSION"_*.deb "$OUT"/dyncc-central_"$VERSION"_*.deb; do
    log "$(basename "$deb"): $(du -h "$deb" | cut -f1) ($(dpkg-deb -f "$deb" Installed-Size) KiB installed)"
done
log "built in $((took / 1000)).$(( (took % 1000) / 100 )) s"
if [[ ${DYNCC_DEB_LINTIAN:-0} == 1 ]]; then
    lintian --fail-on error "$OUT"/dyncc-edge_"$VERSION"_*.deb "$OUT"/dyncc-central_"$VERSION"_*.deb
fi
