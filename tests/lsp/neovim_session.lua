-- Run by tests/lsp/test_neovim.py in `nvim --headless --clean -l`: open a .qpat file, start `qlower lsp` with
-- Neovim's own client (vim.lsp), wait for diagnostics, hover and go to definition at byte columns past non-ASCII
-- text, and write what Neovim saw as JSON.   nvim --headless --clean -l neovim_session.lua FILE OUT PYTHON
local file, out, python = arg[1], arg[2], arg[3]
vim.filetype.add({ extension = { qpat = "qpat" } })
vim.cmd.edit(file)
local buf = vim.api.nvim_get_current_buf()
local id = vim.lsp.start({ name = "qlower", cmd = { python, "-m", "qlower.cli.main", "lsp" },
                           root_dir = vim.fs.dirname(file) }, { bufnr = buf })
local result = { started = id ~= nil }
local got = vim.wait(300000, function() return #vim.diagnostic.get(buf) > 0 end, 50)
local client = id and vim.lsp.get_client_by_id(id)
result.encoding = client and client.offset_encoding
result.diagnostics = {}
for _, d in ipairs(vim.diagnostic.get(buf)) do
  table.insert(result.diagnostics, { lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
                                     message = d.message, code = d.code })
end
result.waited = got

local function ask(method, line, col)
  vim.api.nvim_win_set_cursor(0, { line + 1, col })
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local answers = vim.lsp.buf_request_sync(buf, method, params, 300000) or {}
  for _, a in pairs(answers) do
    if a.result then return a.result end
  end
  return vim.NIL
end

if client then
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  for i, text in ipairs(lines) do
    local at = text:find("mllm.Repeat", 1, true)
    if at and text:find("match", 1, true) then
      result.definition = ask("textDocument/definition", i - 1, at + 5)  -- a byte column inside `Repeat`
    end
    local fn = text:find("rank(", 1, true)
    if fn then
      result.hover = ask("textDocument/hover", i - 1, fn)  -- the byte column of `a` in `rank`, past `é→😀`
    end
  end
  client:stop(true)
end
vim.fn.writefile({ vim.json.encode(result) }, out)
vim.cmd("qa!")
