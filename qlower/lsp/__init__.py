"""The .qpat language server (`qlower lsp`)."""
