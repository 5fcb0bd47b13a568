"""Read plotly figures the way the browser does: from JSON, typed arrays decoded."""

import base64
import json

import numpy as np


def decode(value):
    """A plotly JSON value as numpy: base64 typed arrays ({"dtype", "bdata", "shape"}) or lists."""
    if isinstance(value, dict) and "bdata" in value:
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]).newbyteorder("<"))
        if "shape" in value:
            array = array.reshape([int(s) for s in str(value["shape"]).split(",")])
        return array
    return np.asarray(value)


def spec_of(fig_or_json):
    """Figure, JSON string or AppTest element -> dict spec."""
    if hasattr(fig_or_json, "proto"):
        return json.loads(fig_or_json.proto.spec)
    if hasattr(fig_or_json, "to_json"):
        return json.loads(fig_or_json.to_json())
    return json.loads(fig_or_json)
