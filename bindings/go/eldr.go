// Package eldr is the Go binding of eldr, expert-locality-aware decode
// routing for Mixture-of-Experts serving, over the C library libeldr.so.
//
// Two ways to use it:
//   - Sidecar: a Client talks to the node's eldrd through shared memory;
//     engines Push footprints, gateways Wait for the decode worker chosen for
//     a request id.
//   - Embedded: FitTable or LoadTable, then NewRouter and Route in-process.
//
// Every fallible call returns an error that is an *Error carrying the C
// status (a Status, usable with errors.Is) and the library's detail message,
// read inside the same C call so that goroutines moving between OS threads
// never see another call's message. Handles are released with Close.
//
// Building needs eldr.h and libeldr.so: inside the eldr source tree the header
// is found relative to this package; point the linker at the library with
// CGO_LDFLAGS="-L<build>/lib -Wl,-rpath,<build>/lib".
package eldr

/*
#cgo CFLAGS: -I${SRCDIR}/../../capi/include
#cgo LDFLAGS: -leldr
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// ABIVersion is the ABI of the eldr.h this package was compiled against.
const ABIVersion = uint32(C.ELDR_ABI_VERSION)

// MaxRequestIDBytes is the longest request id the sidecar accepts.
const MaxRequestIDBytes = C.ELDRGO_MAX_REQUEST_ID

// abiErr is non-nil when the loaded libeldr.so has another ABI than the
// header: every constructor returns it instead of calling into the library.
var abiErr = checkABI()

func checkABI() error {
	loaded := uint32(C.eldr_abi_version())
	if loaded != ABIVersion {
		return &Error{Status: ErrIncompatible, Message: fmt.Sprintf(
			"libeldr.so has ABI %d, this package was built for ABI %d", loaded, ABIVersion)}
	}
	return nil
}

// CheckABI reports whether the loaded library matches this package's ABI.
func CheckABI() error { return abiErr }

// The eldr version this package was built for: eldr.h's, the project's one
// version (the module's release tags follow it, as vMAJOR.MINOR.PATCH).
const (
	VersionMajor = int(C.ELDR_VERSION_MAJOR)
	VersionMinor = int(C.ELDR_VERSION_MINOR)
	VersionPatch = int(C.ELDR_VERSION_PATCH)
)

// BindingVersion is VersionMajor.VersionMinor.VersionPatch, e.g. "0.1.0".
var BindingVersion = fmt.Sprintf("%d.%d.%d", VersionMajor, VersionMinor, VersionPatch)

// Version is the loaded library's version string, e.g. "0.1.0".
func Version() string { return C.GoString(C.eldr_version_string()) }

// VersionNumber is the loaded library's MAJOR*10000 + MINOR*100 + PATCH.
func VersionNumber() uint32 { return uint32(C.eldr_version_number()) }

// Status is a C API status code (ELDR_E_*): 0 is success, codes are negative
// and pinned forever. It implements error, so errors.Is(err, eldr.ErrTimeout)
// works on any error this package returns.
type Status int32

// Status codes, as in eldr.h.
const (
	StatusOK           Status = C.ELDR_OK
	ErrInvalidArgument Status = C.ELDR_E_INVALID_ARGUMENT
	ErrShapeMismatch   Status = C.ELDR_E_SHAPE_MISMATCH
	ErrOutOfRange      Status = C.ELDR_E_OUT_OF_RANGE
	ErrIO              Status = C.ELDR_E_IO
	ErrCorrupt         Status = C.ELDR_E_CORRUPT
	ErrUnsupported     Status = C.ELDR_E_UNSUPPORTED
	ErrNotFound        Status = C.ELDR_E_NOT_FOUND
	ErrNoWorker        Status = C.ELDR_E_NO_WORKER
	ErrCapacity        Status = C.ELDR_E_CAPACITY
	ErrState           Status = C.ELDR_E_STATE
	ErrInternal        Status = C.ELDR_E_INTERNAL
	ErrRingFull        Status = C.ELDR_E_RING_FULL
	ErrTimeout         Status = C.ELDR_E_TIMEOUT
	ErrNoDaemon        Status = C.ELDR_E_NO_DAEMON
	ErrIncompatible    Status = C.ELDR_E_INCOMPATIBLE
	ErrOutOfMemory     Status = C.ELDR_E_OUT_OF_MEMORY
	ErrCUDA            Status = C.ELDR_E_CUDA
	ErrPermission      Status = C.ELDR_E_PERMISSION
)

// Name is the code's "ELDR_E_TIMEOUT" style name ("ELDR_E_UNKNOWN" if unknown).
func (s Status) Name() string { return C.GoString(C.eldr_status_name(C.int32_t(s))) }

// Description is the code's one-line English description.
func (s Status) Description() string { return C.GoString(C.eldr_status_string(C.int32_t(s))) }

func (s Status) Error() string { return s.Name() + ": " + s.Description() }

// Error is a failed call: its status and the library's detail message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Status.Error()
	}
	return e.Status.Name() + ": " + e.Message
}

// Unwrap makes errors.Is(err, eldr.ErrTimeout) and errors.As work.
func (e *Error) Unwrap() error { return e.Status }

// toError turns a shim result into nil or an *Error, freeing the C message.
func toError(r C.eldrgo_err) error {
	if r.status == C.ELDR_OK {
		return nil
	}
	msg := ""
	if r.message != nil {
		msg = C.GoString(r.message)
		C.free(unsafe.Pointer(r.message))
	}
	return &Error{Status: Status(r.status), Message: msg}
}

func invalid(format string, args ...interface{}) error {
	return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

func closedError(what string) error {
	return &Error{Status: ErrState, Message: what + " is closed"}
}

// Footprint is one request's prefill footprint: int16 counts, row-major
// [Layers][Experts], of how many prompt tokens each MoE layer routed to each
// expert.
type Footprint struct {
	Counts  []int16
	Layers  uint32
	Experts uint32
}

// validate guarantees the C call never reads past Counts.
func (f Footprint) validate() error {
	if f.Layers == 0 || f.Experts == 0 {
		return invalid("empty footprint shape [%d][%d]", f.Layers, f.Experts)
	}
	cells := uint64(f.Layers) * uint64(f.Experts)
	if uint64(len(f.Counts)) != cells {
		return invalid("footprint holds %d counts, shape [%d][%d] needs %d",
			len(f.Counts), f.Layers, f.Experts, cells)
	}
	return nil
}

func (f Footprint) ptr() *C.int16_t { return (*C.int16_t)(unsafe.Pointer(&f.Counts[0])) }

func validateRequestID(id string) error {
	if len(id) == 0 || len(id) > MaxRequestIDBytes {
		return invalid("request id must be 1..%d bytes, got %d", MaxRequestIDBytes, len(id))
	}
	if strings.IndexByte(id, 0) >= 0 {
		return invalid("request id contains a NUL byte")
	}
	return nil
}
