// Starts `qlower lsp` (stdio) for .qpat files; the command is the `qlower.command` setting.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace.getConfiguration("qlower").get("command");
  client = new LanguageClient(
    "qlower",
    "qlower",
    { command, args },
    { documentSelector: [{ scheme: "file", language: "qpat" }] }
  );
  client.start();
  context.subscriptions.push({ dispose: () => client && client.stop() });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
