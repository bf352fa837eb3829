"""The model zoo's architectures: small configs of real transformers models with random weights (decoders,
encoders, vision and speech towers: Swin, ConvNeXt, SegFormer, MobileViT, BEiT, Wav2Vec2, ... among them), and
ResNet-18 / MobileNetV2 / MobileNetV3-small written here after torchvision's published architectures
(torchvision does not import beside the torch this project pins, so the zoo builds them itself).

Each builder returns (module, example inputs as a tuple of tensors); the module's forward returns one tensor.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Builder = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]


def _randomize_bn(model: nn.Module) -> nn.Module:
    """Running statistics away from (0, 1) so batch norm folding is exercised with real numbers."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)
    return model


class _First(nn.Module):
    """Calls the model and keeps the first tensor of its output (logits / last hidden state)."""

    def __init__(self, model: nn.Module, key: str | None = None) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        out = self.model(*args)
        if self.key is not None:
            return getattr(out, self.key)
        if isinstance(out, torch.Tensor):
            return out
        return out[0]


# ------------------------------------------------------------------ transformers decoders and encoders

def _causal_lm(config_cls: str, **kw) -> Builder:
    def build():
        import transformers

        cfg = getattr(transformers, config_cls)(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                 num_hidden_layers=1, vocab_size=128, max_position_embeddings=64,
                                                 **kw)
        cfg.use_cache = False
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
        return _First(model, "logits"), (ids,)
    return build


def _gpt2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=128, n_positions=64, use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return _First(model, "logits"), (ids,)


def _bert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1,
                                  vocab_size=128, max_position_embeddings=64)
    model = transformers.BertModel(cfg, add_pooling_layer=False)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])  # right padding
    return _First(model, "last_hidden_state"), (ids, mask)


def _t5_encoder() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.T5Config(d_model=64, d_ff=128, num_heads=4, d_kv=16, num_layers=1, vocab_size=128)
    model = transformers.T5EncoderModel(cfg)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return _First(model, "last_hidden_state"), (ids,)


def _image(size: int = 32, channels: int = 3) -> torch.Tensor:
    return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(0))


def _vit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.ViTConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1,
                                 image_size=32, patch_size=8)
    return _First(transformers.ViTModel(cfg, add_pooling_layer=False), "last_hidden_state"), (_image(),)


def _clip_vision() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                        num_hidden_layers=1, image_size=32, patch_size=8)
    return _First(transformers.CLIPVisionModel(cfg), "last_hidden_state"), (_image(),)


def _whisper_encoder() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.WhisperConfig(d_model=64, encoder_ffn_dim=128, encoder_attention_heads=4, encoder_layers=1,
                                     decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                                     num_mel_bins=16, max_source_positions=16, vocab_size=128,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    enc = transformers.WhisperModel(cfg).get_encoder()
    feats = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    return _First(enc, "last_hidden_state"), (feats,)


class _VisionTower(nn.Module):
    """A Qwen-VL vision tower at a fixed image grid. The grid-derived indices (rotary positions, attention
    segment bounds, window order) are computed once here and passed as transformers' precomputed kwargs,
    as they are data-dependent for torch.export; they are plain tensors, not module state."""

    def __init__(self, tower: nn.Module, grid: list[int], window: bool = False) -> None:
        super().__init__()
        from transformers import vision_utils as vu

        self.tower = tower
        g = torch.tensor([grid])
        pre = {"position_ids": vu.get_vision_position_ids(g, tower.spatial_merge_size)}
        pre["cu_seqlens"], pre["max_seqlen"] = vu.get_vision_attention_seqlens(g, tower.config)
        if window:
            wi, cw = vu.get_vision_window_index(g, spatial_merge_size=tower.spatial_merge_size,
                                                window_size=tower.window_size, patch_size=tower.patch_size)
            pre["window_index"], pre["cu_window_seqlens"] = wi, cw
            pre["max_window_seqlen"] = vu.get_max_seqlen(cw, tower.config)
        self._pre = [g, pre]  # a list: torch.export must not lift these as module constants

    def forward(self, patches):
        g, pre = self._pre
        return self.tower(patches, grid_thw=g, **dict(pre)).pooler_output


def _qwen2_vl_vision() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

    cfg = Qwen2VLVisionConfig(depth=1, embed_dim=64, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=4,
                              temporal_patch_size=2, spatial_merge_size=2, in_channels=3)
    cfg._attn_implementation = "eager"
    tower = Qwen2VisionTransformerPretrainedModel(cfg)
    grid = [1, 4, 4]
    patches = torch.randn(16, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(0))
    return _VisionTower(tower, grid), (patches,)


def _qwen25_vl_vision() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Four attention windows (window_size 16 = 2x2 merged patches of the 4x4 merged grid) in block 0, full
    attention in block 1 (fullatt_block_indexes), window_index reordering around them. Transformers' eager
    attention splits q/k/v by lengths read from the constant window bounds (`.tolist()`); torch.export
    leaves them as unbacked sizes, which qlower's torch importer computes from the constants."""
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    cfg = Qwen2_5_VLVisionConfig(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                                 patch_size=4, temporal_patch_size=2, spatial_merge_size=2, window_size=16,
                                 fullatt_block_indexes=[1], in_channels=3)
    cfg._attn_implementation = "eager"
    tower = Qwen2_5_VisionTransformerPretrainedModel(cfg)
    grid = [1, 8, 8]
    patches = torch.randn(64, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(0))
    return _VisionTower(tower, grid, window=True), (patches,)


def _hf_resnet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                    layer_type="bottleneck", num_labels=10)
    model = _randomize_bn(transformers.ResNetForImageClassification(cfg))
    return _First(model, "logits"), (_image(64),)


def _hf_mobilenet_v2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.MobileNetV2Config(depth_multiplier=0.35, image_size=64, num_labels=10)
    model = _randomize_bn(transformers.MobileNetV2ForImageClassification(cfg))
    return _First(model, "logits"), (_image(64),)


# ------------------------------------------------------------------ torchvision architectures, rewritten

def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layout: 7x7/2 stem, 3x3/2 max pool, four stages of two BasicBlocks."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision.models.mobilenet_v2's layout (width 1.0): inverted residuals with ReLU6."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                    [6, 320, 1, 1]]
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in settings:
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class _SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return s * x


class _V3Block(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        a = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(_conv_bn(cin, exp, 1, act=a))
        layers.append(_conv_bn(exp, exp, k, stride, groups=exp, act=a))
        if se:
            layers.append(_SqueezeExcitation(exp, _make_divisible(exp // 4, 8)))
        layers.append(_conv_bn(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class MobileNetV3Small(nn.Module):
    """torchvision.models.mobilenet_v3_small's layout: hardswish, squeeze-excitation with hardsigmoid."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        conf = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
                (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
                (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
                (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [_V3Block(*c) for c in conf]
        layers.append(_conv_bn(96, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                        nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _tv(cls: type) -> Builder:
    def build():
        torch.manual_seed(0)
        return _randomize_bn(cls()), (_image(64),)
    return build


# ------------------------------------------------------------------ more families deployed on Snapdragon

def _swin() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Window partition / reverse are rank-6 view+permute; stage 2 shifts windows (roll) with a mask."""
    import transformers

    cfg = transformers.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[2, 1], num_heads=[2, 4],
                                  window_size=4, mlp_ratio=2.0)
    return _First(transformers.SwinModel(cfg, add_pooling_layer=False), "last_hidden_state"), (_image(),)


def _convnext() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Depthwise 7x7, LayerNorm over channels-last, GELU, layer scale."""
    import transformers

    cfg = transformers.ConvNextConfig(num_channels=3, patch_size=4, hidden_sizes=[16, 32], depths=[1, 1],
                                      num_stages=2, num_labels=10)
    return _First(transformers.ConvNextForImageClassification(cfg), "logits"), (_image(),)


def _segformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Overlapping patch embeddings, spatial-reduction attention (a strided conv on keys/values), Mix-FFN
    (depthwise 3x3 between the linears), an all-MLP decode head with bilinear upsampling."""
    import transformers

    cfg = transformers.SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                       hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                       num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32,
                                       num_labels=4)
    return _First(transformers.SegformerForSemanticSegmentation(cfg), "logits"), (_image(),)


def _deit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """ViT with a distillation token; the distilled classifier averages the two heads."""
    import transformers

    cfg = transformers.DeiTConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  num_hidden_layers=1, image_size=32, patch_size=8, num_labels=10)
    return _First(transformers.DeiTForImageClassificationWithTeacher(cfg), "logits"), (_image(),)


def _distilbert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    import transformers

    cfg = transformers.DistilBertConfig(dim=64, hidden_dim=128, n_heads=4, n_layers=1, vocab_size=128,
                                        max_position_embeddings=64)
    model = transformers.DistilBertModel(cfg)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    return _First(model, "last_hidden_state"), (ids, mask)


def _roberta() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Position ids from the input ids (cumsum over the non-padding mask, offset by padding_idx)."""
    import transformers

    cfg = transformers.RobertaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                     num_hidden_layers=1, vocab_size=128, max_position_embeddings=64)
    model = transformers.RobertaModel(cfg, add_pooling_layer=False)
    ids = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    ids[0, 6:] = cfg.pad_token_id
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    return _First(model, "last_hidden_state"), (ids, mask)


def _wav2vec2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Raw-waveform conv feature extractor (group norm on the first layer), grouped positional conv, encoder."""
    import transformers

    cfg = transformers.Wav2Vec2Config(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                      num_hidden_layers=1, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2),
                                      conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                                      num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                                      do_stable_layer_norm=False, vocab_size=32)
    wave = torch.randn(1, 400, generator=torch.Generator().manual_seed(0))
    return _First(transformers.Wav2Vec2Model(cfg), "last_hidden_state"), (wave,)


def _opt() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Learned positions offset by 2, ReLU MLP, pre-LayerNorm decoder."""
    import transformers

    cfg = transformers.OPTConfig(hidden_size=64, ffn_dim=128, num_attention_heads=4, num_hidden_layers=1,
                                 vocab_size=128, max_position_embeddings=64, word_embed_proj_dim=64,
                                 use_cache=False)
    model = transformers.OPTForCausalLM(cfg)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return _First(model, "logits"), (ids,)


def _gpt_neox() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Fused qkv, partial rotary (rotary_pct 0.25), parallel attention + MLP residual."""
    import transformers

    cfg = transformers.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                     num_hidden_layers=1, vocab_size=128, max_position_embeddings=64,
                                     rotary_pct=0.25, use_parallel_residual=True, use_cache=False)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return _First(model, "logits"), (ids,)


def _mobilevit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """MobileNetV2 blocks with transformer blocks over unfolded 2x2 patches (reshape/transpose shuffles)."""
    import transformers

    cfg = transformers.MobileViTConfig(image_size=64, num_channels=3, hidden_sizes=[16, 24, 32],
                                       neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], num_attention_heads=2,
                                       mlp_ratio=2.0, expand_ratio=2.0, num_labels=10)
    model = _randomize_bn(transformers.MobileViTForImageClassification(cfg))
    return _First(model, "logits"), (_image(64),)


def _beit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Relative position bias tables indexed per head, layer scale, mean-pooled head."""
    import transformers

    cfg = transformers.BeitConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1,
                                  image_size=32, patch_size=8, use_relative_position_bias=True,
                                  use_mean_pooling=True, num_labels=10)
    return _First(transformers.BeitForImageClassification(cfg), "logits"), (_image(),)


def _falcon() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Multi-query attention (one kv head), parallel attention + MLP, rotary."""
    import transformers

    cfg = transformers.FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, vocab_size=128,
                                    multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                                    alibi=False, use_cache=False)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return _First(model, "logits"), (ids,)


MODELS: dict[str, Builder] = {
    "llama": _causal_lm("LlamaConfig", num_key_value_heads=2),
    "qwen2": _causal_lm("Qwen2Config", num_key_value_heads=2),
    "qwen3": _causal_lm("Qwen3Config", num_key_value_heads=2, head_dim=16),
    "mistral": _causal_lm("MistralConfig", num_key_value_heads=2),
    "phi3": _causal_lm("Phi3Config", num_key_value_heads=2, pad_token_id=0),
    "gemma": _causal_lm("GemmaConfig", num_key_value_heads=2, head_dim=16),
    "gemma2": _causal_lm("Gemma2Config", num_key_value_heads=2, head_dim=16),
    "gpt2": _gpt2,
    "bert": _bert,
    "t5-encoder": _t5_encoder,
    "vit": _vit,
    "clip-vision": _clip_vision,
    "whisper-encoder": _whisper_encoder,
    "qwen2-vl-vision": _qwen2_vl_vision,
    "qwen2.5-vl-vision": _qwen25_vl_vision,
    "hf-resnet": _hf_resnet,
    "hf-mobilenet-v2": _hf_mobilenet_v2,
    "tv-resnet18": _tv(ResNet18),
    "tv-mobilenet-v2": _tv(MobileNetV2),
    "tv-mobilenet-v3-small": _tv(MobileNetV3Small),
    "swin": _swin,
    "convnext": _convnext,
    "segformer": _segformer,
    "deit": _deit,
    "distilbert": _distilbert,
    "roberta": _roberta,
    "wav2vec2": _wav2vec2,
    "opt": _opt,
    "gpt-neox": _gpt_neox,
    "mobilevit": _mobilevit,
    "beit": _beit,
    "falcon": _falcon,
    "llama-tied": _causal_lm("LlamaConfig", num_key_value_heads=1, head_dim=32, tie_word_embeddings=True),
}
