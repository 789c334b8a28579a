package eldr

/*
#include "shim.h"

typedef struct { eldrgo_err err; eldr_table_t* table; } eldrgo_table_result;

static eldrgo_table_result eldrgo_table_load(const char* path) {
  eldrgo_table_result r = {{0, NULL}, NULL};
  r.err = eldrgo_check(eldr_table_load(path, &r.table));
  return r;
}

static eldrgo_table_result eldrgo_table_fit(const int16_t* prefill, const int16_t* decode,
                                            uint64_t n, uint32_t layers, uint32_t experts,
                                            uint32_t top_k, uint32_t workers, uint64_t seed,
                                            uint32_t select_layers, uint32_t max_iterations,
                                            uint32_t threads) {
  eldrgo_table_result r = {{0, NULL}, NULL};
  eldr_fit_options_t opts;
  eldr_fit_options_init(&opts);
  opts.num_workers = workers;
  opts.seed = seed;
  opts.select_layers = select_layers;
  if (max_iterations != 0) opts.max_iterations = max_iterations;
  opts.threads = threads;
  r.err = eldrgo_check(eldr_table_fit(prefill, decode, n, layers, experts, top_k, &opts, &r.table));
  return r;
}

static eldrgo_err eldrgo_table_save(const eldr_table_t* t, const char* path) {
  return eldrgo_check(eldr_table_save(t, path));
}

typedef struct { eldrgo_err err; eldr_table_info_t info; } eldrgo_info_result;

static eldrgo_info_result eldrgo_table_info(const eldr_table_t* t) {
  eldrgo_info_result r;
  r.err.message = NULL;
  eldr_table_info_init(&r.info);
  r.err = eldrgo_check(eldr_table_get_info(t, &r.info));
  return r;
}

static eldrgo_err eldrgo_table_worker_ids(const eldr_table_t* t, int32_t* ids, uint32_t n) {
  return eldrgo_check(eldr_table_get_worker_ids(t, ids, n));
}

static eldrgo_err eldrgo_table_signature(const eldr_table_t* t, const int16_t* counts,
                                         uint32_t layers, uint32_t experts, float* out,
                                         uint64_t n) {
  return eldrgo_check(eldr_table_compute_signature(t, counts, layers, experts, out, n));
}

static eldrgo_err eldrgo_table_scores(const eldr_table_t* t, const int16_t* counts,
                                      uint32_t layers, uint32_t experts, float* out, uint32_t n) {
  return eldrgo_check(eldr_table_score(t, counts, layers, experts, out, n));
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

// TableInfo is the shape and parameters of a cluster table.
type TableInfo struct {
	Layers, Experts, TopK uint32
	NumWorkers            uint32 // clusters = decode workers
	NumSelectedLayers     uint32
	DefaultTau            float32
}

// Table is an immutable cluster table; its methods are safe from any
// goroutine. A Router keeps its own reference: the table may be closed once
// routers are built.
type Table struct {
	mu  sync.RWMutex
	ptr *C.eldr_table_t
}

// LoadTable loads and verifies a cluster table file.
func LoadTable(path string) (*Table, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if containsNUL(path) {
		return nil, invalid("path contains a NUL byte")
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	r := C.eldrgo_table_load(cpath)
	if err := toError(r.err); err != nil {
		return nil, err
	}
	return &Table{ptr: r.table}, nil
}

// Calibration holds N requests' footprints, each [Layers][Experts] int16
// counts, concatenated; Decode (optional, the same requests' decode-phase
// counts) enables layer selection.
type Calibration struct {
	Prefill []int16
	Decode  []int16
	N       uint64
	Layers  uint32
	Experts uint32
	TopK    uint32 // experts per token of the model
}

// FitOptions tunes FitTable; zero values mean the library's defaults except
// NumWorkers (required) and SelectLayers.
type FitOptions struct {
	NumWorkers    uint32
	Seed          uint64 // 0 = 1
	SelectLayers  bool   // greedy layer selection (needs Decode)
	MaxIterations uint32 // 0 = default (50)
	Threads       uint32 // 0 = all cores
}

// FitTable fits a table from calibration footprints.
func FitTable(cal Calibration, opts FitOptions) (*Table, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if cal.N == 0 || cal.Layers == 0 || cal.Experts == 0 {
		return nil, invalid("empty calibration shape [%d][%d][%d]", cal.N, cal.Layers, cal.Experts)
	}
	cells := cal.N * uint64(cal.Layers) * uint64(cal.Experts)
	if cells/cal.N != uint64(cal.Layers)*uint64(cal.Experts) {
		return nil, invalid("calibration shape overflows")
	}
	if uint64(len(cal.Prefill)) != cells {
		return nil, invalid("prefill holds %d counts, [%d][%d][%d] needs %d",
			len(cal.Prefill), cal.N, cal.Layers, cal.Experts, cells)
	}
	var decode *C.int16_t
	if cal.Decode != nil {
		if uint64(len(cal.Decode)) != cells {
			return nil, invalid("decode holds %d counts, [%d][%d][%d] needs %d",
				len(cal.Decode), cal.N, cal.Layers, cal.Experts, cells)
		}
		decode = (*C.int16_t)(unsafe.Pointer(&cal.Decode[0]))
	}
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	selectLayers := C.uint32_t(0)
	if opts.SelectLayers {
		selectLayers = 1
	}
	r := C.eldrgo_table_fit((*C.int16_t)(unsafe.Pointer(&cal.Prefill[0])), decode,
		C.uint64_t(cal.N), C.uint32_t(cal.Layers), C.uint32_t(cal.Experts), C.uint32_t(cal.TopK),
		C.uint32_t(opts.NumWorkers), C.uint64_t(seed), selectLayers,
		C.uint32_t(opts.MaxIterations), C.uint32_t(opts.Threads))
	if err := toError(r.err); err != nil {
		return nil, err
	}
	return &Table{ptr: r.table}, nil
}

// Close releases the table (idempotent).
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	C.eldr_table_free(t.ptr)
	t.ptr = nil
	return nil
}

// Save writes the table atomically (temporary file + rename).
func (t *Table) Save(path string) error {
	if containsNUL(path) {
		return invalid("path contains a NUL byte")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return closedError("table")
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return toError(C.eldrgo_table_save(t.ptr, cpath))
}

// Info returns the table's shape and parameters.
func (t *Table) Info() (TableInfo, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.infoLocked()
}

func (t *Table) infoLocked() (TableInfo, error) {
	if t.ptr == nil {
		return TableInfo{}, closedError("table")
	}
	r := C.eldrgo_table_info(t.ptr)
	if err := toError(r.err); err != nil {
		return TableInfo{}, err
	}
	return TableInfo{
		Layers: uint32(r.info.layers), Experts: uint32(r.info.experts), TopK: uint32(r.info.top_k),
		NumWorkers: uint32(r.info.num_workers), NumSelectedLayers: uint32(r.info.num_selected_layers),
		DefaultTau: float32(r.info.default_tau),
	}, nil
}

// WorkerIDs is the worker owning each cluster, in cluster order.
func (t *Table) WorkerIDs() ([]int32, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	info, err := t.infoLocked()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, info.NumWorkers)
	if len(ids) == 0 {
		return ids, nil
	}
	err = toError(C.eldrgo_table_worker_ids(t.ptr, (*C.int32_t)(unsafe.Pointer(&ids[0])),
		C.uint32_t(len(ids))))
	return ids, err
}

// Signature is the request's signature: count * IDF over the selected layers, unit L2.
func (t *Table) Signature(fp Footprint) ([]float32, error) {
	if err := fp.validate(); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	info, err := t.infoLocked()
	if err != nil {
		return nil, err
	}
	out := make([]float32, int(info.NumSelectedLayers)*int(info.Experts))
	if len(out) == 0 {
		return nil, &Error{Status: ErrInternal, Message: "table has no selected layers"}
	}
	err = toError(C.eldrgo_table_signature(t.ptr, fp.ptr(), C.uint32_t(fp.Layers),
		C.uint32_t(fp.Experts), (*C.float)(unsafe.Pointer(&out[0])), C.uint64_t(len(out))))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Scores is the similarity to each cluster centroid, in cluster order.
func (t *Table) Scores(fp Footprint) ([]float32, error) {
	if err := fp.validate(); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	info, err := t.infoLocked()
	if err != nil {
		return nil, err
	}
	out := make([]float32, info.NumWorkers)
	if len(out) == 0 {
		return nil, &Error{Status: ErrInternal, Message: "table has no workers"}
	}
	err = toError(C.eldrgo_table_scores(t.ptr, fp.ptr(), C.uint32_t(fp.Layers),
		C.uint32_t(fp.Experts), (*C.float)(unsafe.Pointer(&out[0])), C.uint32_t(len(out))))
	if err != nil {
		return nil, err
	}
	return out, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
