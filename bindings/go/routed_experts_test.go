package eldr

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// Payloads built here as the engines build them (raw little-endian ids,
// standard base64, a .npy written byte by byte) against a bincount.

const reRows, reHidden, reK, reExperts = 33, 5, 3, 50

func reIDs(seed int64) []int {
	rng := rand.New(rand.NewSource(seed))
	ids := make([]int, reRows*reHidden*reK)
	for i := range ids {
		ids[i] = rng.Intn(reExperts)
	}
	return ids
}

func reBincount(ids []int, moe []int, rows int) []int16 {
	fp := make([]int16, len(moe)*reExperts)
	for r := 0; r < rows; r++ {
		for l, h := range moe {
			for j := 0; j < reK; j++ {
				if id := ids[(r*reHidden+h)*reK+j]; id >= 0 {
					fp[l*reExperts+id]++
				}
			}
		}
	}
	return fp
}

func reNpy(descr string, data []byte) []byte {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d, %d), }",
		descr, reRows, reHidden, reK)
	for (10+len(dict)+1)%64 != 0 {
		dict += " "
	}
	dict += "\n"
	out := []byte("\x93NUMPY\x01\x00")
	out = append(out, byte(len(dict)&0xff), byte(len(dict)>>8))
	out = append(out, dict...)
	return append(out, data...)
}

func TestFootprintFromSGLangInt32PromptRows(t *testing.T) {
	ids := reIDs(1)
	raw := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(id))
	}
	opts := RoutedExpertsOptions{NumExperts: reExperts, NumHiddenLayers: reHidden, TopK: reK,
		RowCount: 20}
	fp, info, err := FootprintFromSGLang(base64.StdEncoding.EncodeToString(raw), "", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fp, reBincount(ids, []int{0, 1, 2, 3, 4}, 20)) {
		t.Fatal("footprint differs from the bincount")
	}
	if info.RowsInPayload != reRows || info.RowsCounted != 20 || info.Dtype != "int32" {
		t.Fatalf("info %+v", info)
	}
	same, _, err := FootprintFromIDs(raw, "int32", opts)
	if err != nil || !reflect.DeepEqual(same, fp) {
		t.Fatalf("raw ids: %v", err)
	}
}

func TestFootprintFromVLLMNpyDenseLayers(t *testing.T) {
	ids := reIDs(2)
	raw := make([]byte, 2*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint16(raw[2*i:], uint16(id))
	}
	text := base64.StdEncoding.EncodeToString(reNpy("<u2", raw))
	fp, info, err := FootprintFromVLLM(text, RoutedExpertsOptions{NumExperts: reExperts,
		MoELayers: []uint32{1, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fp, reBincount(ids, []int{1, 4}, reRows)) || info.Layers != 2 {
		t.Fatalf("footprint differs from the bincount (info %+v)", info)
	}
	// Every layer, the layer count read from the header.
	fp, info, err = FootprintFromVLLM(text, RoutedExpertsOptions{NumExperts: reExperts})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fp, reBincount(ids, []int{0, 1, 2, 3, 4}, reRows)) ||
		info.NumHiddenLayers != reHidden || info.Dtype != "uint16" {
		t.Fatalf("info %+v", info)
	}
	_, _, err = FootprintFromVLLM(text[:len(text)-8], RoutedExpertsOptions{NumExperts: reExperts})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated .npy: %v", err)
	}
}

func TestFootprintFromIDsCachedAndErrors(t *testing.T) {
	ids := reIDs(3)
	ids[0], ids[7] = -1, -1
	raw := make([]byte, 2*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint16(raw[2*i:], uint16(int16(id)))
	}
	opts := RoutedExpertsOptions{NumExperts: reExperts, NumHiddenLayers: reHidden, TopK: reK}
	fp, info, err := FootprintFromIDs(raw, "int16", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fp, reBincount(ids, []int{0, 1, 2, 3, 4}, reRows)) ||
		info.CachedEntries != 2 {
		t.Fatalf("info %+v", info)
	}
	if _, _, err := FootprintFromSGLang("AA*A", "uint8", opts); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "base64") {
		t.Fatalf("bad base64: %v", err)
	}
	opts.NumExperts = reExperts - 1
	if _, _, err := FootprintFromIDs(raw, "int16", opts); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("id past E: %v", err)
	}
	if _, _, err := FootprintFromIDs(raw, "float32", opts); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad dtype: %v", err)
	}
}
