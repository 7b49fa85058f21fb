// The YAML language server's diagnostics for YAML files, as JSON lines {file, problems: [{line, col, message}]}
// (1-based). Usage: node editors.js NODE_MODULES SCHEMA|- FILE...; with SCHEMA the files are associated with it
// (as an editor setting would), with - only their `# yaml-language-server: $schema=` modeline names one.
const fs = require('fs'), path = require('path'), url = require('url');
const [modules, schemaPath, ...files] = process.argv.slice(2);
const {getLanguageService} = require(path.resolve(modules, 'yaml-language-server/lib/umd/languageservice/yamlLanguageService'));
const {TextDocument} = require(path.resolve(modules, 'vscode-languageserver-textdocument'));
const ls = getLanguageService({
  schemaRequestService: (uri) => Promise.resolve(fs.readFileSync(url.fileURLToPath(uri), 'utf8')),
  workspaceContext: {resolveRelativePath: (rel, res) =>
    url.pathToFileURL(path.resolve(path.dirname(url.fileURLToPath(res)), rel)).href},
});
const schemas = schemaPath === '-' ? [] : [{uri: url.pathToFileURL(path.resolve(schemaPath)).href, fileMatch: ['*.yaml']}];
ls.configure({validate: true, hover: false, completion: false, yamlVersion: '1.2', schemas});
(async () => {
  for (const f of files) {
    const doc = TextDocument.create(url.pathToFileURL(path.resolve(f)).href, 'yaml', 1, fs.readFileSync(f, 'utf8'));
    const problems = (await ls.doValidation(doc, false)).map((d) =>
      ({line: d.range.start.line + 1, col: d.range.start.character + 1, message: d.message}));
    console.log(JSON.stringify({file: f, problems}));
  }
})().catch((e) => { console.error(e); process.exit(1); });
