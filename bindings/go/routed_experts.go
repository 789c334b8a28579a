package eldr

/*
#include "shim.h"

#define ELDRGO_RE_IDS 0
#define ELDRGO_RE_BASE64_IDS 1
#define ELDRGO_RE_BASE64_NPY 2
#define ELDRGO_RE_NPY_SHAPE 3

typedef struct { eldrgo_err err; eldr_routed_experts_info_t info; } eldrgo_re_result;

// One decode and its message in one C call (see shim.h): kind picks the entry point.
static eldrgo_re_result eldrgo_routed_experts(int kind, const void* payload, size_t len,
                                              uint32_t dtype, uint32_t experts, uint32_t hidden,
                                              uint32_t top_k, const uint32_t* moe, uint32_t n_moe,
                                              uint64_t first_row, uint64_t row_count,
                                              int16_t* out, size_t out_len) {
  eldrgo_re_result r;
  r.err.message = NULL;
  eldr_routed_experts_info_init(&r.info);
  eldr_routed_experts_options_t o;
  eldr_routed_experts_options_init(&o);
  o.num_experts = experts;
  o.num_hidden_layers = hidden;
  o.top_k = top_k;
  o.moe_layers = moe;
  o.num_moe_layers = n_moe;
  o.first_row = first_row;
  o.row_count = row_count;
  eldr_status_t s = ELDR_E_INVALID_ARGUMENT;
  switch (kind) {
    case ELDRGO_RE_IDS:
      s = eldr_routed_experts_decode_ids(payload, len, dtype, &o, out, out_len, &r.info);
      break;
    case ELDRGO_RE_BASE64_IDS:
      s = eldr_routed_experts_decode_base64_ids((const char*)payload, len, dtype, &o, out, out_len,
                                         &r.info);
      break;
    case ELDRGO_RE_BASE64_NPY:
      s = eldr_routed_experts_decode_base64_npy((const char*)payload, len, dtype, &o, out, out_len,
                                         &r.info);
      break;
    case ELDRGO_RE_NPY_SHAPE:
      s = eldr_routed_experts_inspect_base64_npy((const char*)payload, len, &r.info);
      break;
  }
  r.err = eldrgo_check(s);
  return r;
}
*/
import "C"

import (
	"math"
	"unsafe"
)

// RoutedExpertsOptions says how to count an engine's routed-expert payload:
// ids [rows][NumHiddenLayers][TopK], one row per token.
type RoutedExpertsOptions struct {
	NumExperts uint32 // E (required)
	// The payload's layer and top-k axes: required for raw ids; for a .npy,
	// 0 takes them from its shape and a nonzero value must match it.
	NumHiddenLayers uint32
	TopK            uint32
	// Hidden layers that are MoE layers, ascending and unique; nil = all.
	MoELayers []uint32
	// Count rows [FirstRow, FirstRow+RowCount); RowCount 0 = to the end.
	// Rows past the payload are an ErrOutOfRange.
	FirstRow uint64
	RowCount uint64
}

// RoutedExpertsInfo is what a decode saw.
type RoutedExpertsInfo struct {
	Dtype           string // the payload's element type: "uint8", "int32", ...
	NumHiddenLayers uint32
	TopK            uint32
	Layers          uint32 // footprint layers (the MoE layers)
	RowsInPayload   uint64
	RowsCounted     uint64
	CachedEntries   uint64 // int16 -1 (prefix-cache) entries skipped in the counted rows
}

var dtypeCodes = map[string]C.uint32_t{
	"uint8": C.ELDR_DTYPE_UINT8, "uint16": C.ELDR_DTYPE_UINT16, "int16": C.ELDR_DTYPE_INT16,
	"int32": C.ELDR_DTYPE_INT32, "int64": C.ELDR_DTYPE_INT64,
}

func dtypeName(code C.uint32_t) string {
	for name, c := range dtypeCodes {
		if C.uint32_t(c) == code {
			return name
		}
	}
	return ""
}

func dtypeCode(name string) (C.uint32_t, error) {
	code, ok := dtypeCodes[name]
	if !ok {
		return 0, invalid("unknown dtype %q (uint8, uint16, int16, int32, int64)", name)
	}
	return code, nil
}

func (o RoutedExpertsOptions) layers(hidden uint32) uint32 {
	if len(o.MoELayers) > 0 {
		return uint32(len(o.MoELayers))
	}
	return hidden
}

func routedExperts(kind C.int, payload unsafe.Pointer, n int, dtype C.uint32_t,
	o RoutedExpertsOptions, hidden, topK uint32) ([]int16, RoutedExpertsInfo, error) {
	if abiErr != nil {
		return nil, RoutedExpertsInfo{}, abiErr
	}
	if uint64(len(o.MoELayers)) > math.MaxUint32 {
		return nil, RoutedExpertsInfo{}, invalid("too many MoELayers")
	}
	var out []int16
	var outPtr *C.int16_t
	if kind != C.ELDRGO_RE_NPY_SHAPE {
		out = make([]int16, int(o.layers(hidden))*int(o.NumExperts))
		if len(out) > 0 {
			outPtr = (*C.int16_t)(unsafe.Pointer(&out[0]))
		}
	}
	var moe *C.uint32_t
	if len(o.MoELayers) > 0 {
		moe = (*C.uint32_t)(unsafe.Pointer(&o.MoELayers[0]))
	}
	rows := C.uint64_t(o.RowCount)
	if o.RowCount == 0 {
		rows = C.uint64_t(math.MaxUint64) // ELDR_ALL_ROWS
	}
	r := C.eldrgo_routed_experts(kind, payload, C.size_t(n), dtype, C.uint32_t(o.NumExperts),
		C.uint32_t(hidden), C.uint32_t(topK), moe, C.uint32_t(len(o.MoELayers)),
		C.uint64_t(o.FirstRow), rows, outPtr, C.size_t(len(out)))
	if err := toError(r.err); err != nil {
		return nil, RoutedExpertsInfo{}, err
	}
	info := RoutedExpertsInfo{
		Dtype:           dtypeName(r.info.dtype),
		NumHiddenLayers: uint32(r.info.num_hidden_layers),
		TopK:            uint32(r.info.top_k),
		Layers:          uint32(r.info.layers),
		RowsInPayload:   uint64(r.info.rows_in_payload),
		RowsCounted:     uint64(r.info.rows_counted),
		CachedEntries:   uint64(r.info.cached_entries),
	}
	return out, info, nil
}

func stringPtr(s string) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	// The string's bytes, borrowed for the call (Go 1.19 has no unsafe.StringData).
	return unsafe.Pointer(*(**byte)(unsafe.Pointer(&s)))
}

// FootprintFromIDs counts raw little-endian ids [rows][NumHiddenLayers][TopK]
// of dtype ("uint8", "uint16", "int16" with -1 = cached, "int32", "int64")
// into an int16 [Layers][NumExperts] footprint.
func FootprintFromIDs(ids []byte, dtype string,
	opts RoutedExpertsOptions) ([]int16, RoutedExpertsInfo, error) {
	code, err := dtypeCode(dtype)
	if err != nil {
		return nil, RoutedExpertsInfo{}, err
	}
	var p unsafe.Pointer
	if len(ids) > 0 {
		p = unsafe.Pointer(&ids[0])
	}
	return routedExperts(C.ELDRGO_RE_IDS, p, len(ids), code, opts, opts.NumHiddenLayers, opts.TopK)
}

// FootprintFromSGLang counts SGLang's meta_info.routed_experts (base64 raw
// ids) of meta_info.routed_experts_dtype ("" = "int32"). Set RowCount to
// meta_info.prompt_tokens to count the prompt only.
func FootprintFromSGLang(b64 string, dtype string,
	opts RoutedExpertsOptions) ([]int16, RoutedExpertsInfo, error) {
	if dtype == "" {
		dtype = "int32"
	}
	code, err := dtypeCode(dtype)
	if err != nil {
		return nil, RoutedExpertsInfo{}, err
	}
	return routedExperts(C.ELDRGO_RE_BASE64_IDS, stringPtr(b64), len(b64), code, opts,
		opts.NumHiddenLayers, opts.TopK)
}

// FootprintFromVLLM counts vLLM's choices[i].routed_experts (a base64 .npy,
// uint8 or uint16). Without NumHiddenLayers and MoELayers the layer count is
// read from the .npy header first.
func FootprintFromVLLM(b64npy string,
	opts RoutedExpertsOptions) ([]int16, RoutedExpertsInfo, error) {
	hidden, topK := opts.NumHiddenLayers, opts.TopK
	if hidden == 0 && len(opts.MoELayers) == 0 {
		shape, err := NpyShape(b64npy)
		if err != nil {
			return nil, RoutedExpertsInfo{}, err
		}
		hidden = shape.NumHiddenLayers
	}
	o := opts
	o.NumHiddenLayers = hidden
	return routedExperts(C.ELDRGO_RE_BASE64_NPY, stringPtr(b64npy), len(b64npy),
		C.ELDR_DTYPE_AUTO, o, hidden, topK)
}

// NpyShape reads a base64 .npy header alone: dtype, rows and axes in the info,
// nothing counted.
func NpyShape(b64npy string) (RoutedExpertsInfo, error) {
	_, info, err := routedExperts(C.ELDRGO_RE_NPY_SHAPE, stringPtr(b64npy), len(b64npy),
		C.ELDR_DTYPE_AUTO, RoutedExpertsOptions{}, 0, 0)
	return info, err
}
