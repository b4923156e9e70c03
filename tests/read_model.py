#!/usr/bin/python3
"""Reads a hetps model file (safetensors) with json and numpy alone, the
way the format allows by hand: 8-byte little-endian header length, the
JSON header, raw little-endian float32 data. For an mlp it also runs the
forward pass in numpy over the Fashion-MNIST test images and prints the
accuracy, to compare with hetps-train --eval.

usage: read_model.py FILE [DATASET_DIR]
"""
import gzip
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", t
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return meta, tensors


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def main():
    meta, tensors = read(sys.argv[1])
    print("metadata", json.dumps(meta, sort_keys=True))
    for name in sorted(tensors):
        print("tensor", name, list(tensors[name].shape))
    if meta.get("model") != "mlp":
        return
    d = sys.argv[2] if len(sys.argv) > 2 else meta["dataset"]
    x = idx(d + "/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y = idx(d + "/t10k-labels-idx1-ubyte.gz")
    h = x
    layers = sorted({n.split(".")[0] for n in tensors}, key=lambda s: int(s[len("dense"):]))
    for i, layer in enumerate(layers):
        h = h @ tensors[layer + ".weight"].T + tensors[layer + ".bias"]
        if i + 1 < len(layers):
            h = np.maximum(h, 0)
    print("numpy accuracy %.4f" % float((h.argmax(1) == y).mean()))


main()
