// Tokenises .qpat files with VS Code's own TextMate engine (vscode-textmate on vscode-oniguruma) and prints, as
// JSON, each line's tokens [start, end, scopes] and the rule-stack depth at its end (1: back at the top level).
//   node tokenize.js GRAMMAR.json FILE.qpat...     (NODE_PATH: a node_modules holding both packages)
"use strict";
const fs = require("fs");
const path = require("path");
const vsctm = require("vscode-textmate");
const oniguruma = require("vscode-oniguruma");

async function main() {
  const [grammarPath, ...files] = process.argv.slice(2);
  const wasm = fs.readFileSync(path.join(path.dirname(require.resolve("vscode-oniguruma")), "onig.wasm")).buffer;
  await oniguruma.loadWASM(wasm);
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async (scope) =>
      scope === "source.qpat" ? vsctm.parseRawGrammar(fs.readFileSync(grammarPath, "utf8"), grammarPath) : null,
  });
  const grammar = await registry.loadGrammar("source.qpat");
  const out = {};
  for (const file of files) {
    let stack = vsctm.INITIAL;
    out[file] = fs.readFileSync(file, "utf8").split(/\r?\n/).map((line) => {
      const r = grammar.tokenizeLine(line, stack);
      stack = r.ruleStack;
      return { tokens: r.tokens.map((t) => [t.startIndex, t.endIndex, t.scopes]), depth: stack.depth };
    });
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
