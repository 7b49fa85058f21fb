#!/usr/bin/env bash
# Install the editor tooling the schema is written for into .venv/editor-tools (npm; not a dependency of schedgen):
# the YAML language server (VS Code's YAML extension) and taplo (Even Better TOML). tests/frontend/test_editors.py
# runs every bundled spec and error file through them when they are there, and skips (saying so) when not.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "editor_tools: npm not found" >&2; exit 1; }
DEST=.venv/editor-tools
mkdir -p "$DEST"
[ -f "$DEST/package.json" ] || echo '{"name": "schedgen-editor-tools", "private": true}' > "$DEST/package.json"
npm install --silent --no-audit --no-fund --prefix "$DEST" \
  yaml-language-server@1.25.0 @taplo/cli@0.7.0 vscode-languageserver-textdocument@1.0.16
echo "editor tools in $DEST: yaml-language-server 1.25.0, taplo (@taplo/cli 0.7.0)"
