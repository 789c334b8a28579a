package main

// The Endpoint Picker Protocol over Envoy's ext_proc (gateway-api-inference-
// extension docs/proposals/004-endpoint-picker-protocol): one gRPC stream per
// HTTP request. The pick goes back as the header and the dynamic metadata
// (namespace envoy.lb) x-gateway-destination-endpoint, primary first then the
// fallbacks; the subset hint comes in the request's filter metadata
// (envoy.lb.subset_hint); a request the picker cannot place is answered with
// an ImmediateResponse (503 no endpoint, 4xx a bad body). The request holds
// its pick until its response ends, or the stream does (a cancel, a reset,
// the proxy going away): that is where eldr hears the request finished.
//
// Body modes: FULL_DUPLEX_STREAMED (what GIE's gateways configure: the
// header response waits for the whole body, the body is streamed back) or
// BUFFERED (the header response goes at once, the pick rides on the body
// response). Envoy says which in ProcessingRequest.protocol_config; an
// older Envoy that does not gets -body-mode.

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the Endpoint Picker Protocol, and of llm-d's P/D sidecar.
const (
	destinationKey = "x-gateway-destination-endpoint"
	servedKey      = "x-gateway-destination-endpoint-served"
	subsetKey      = "x-gateway-destination-endpoint-subset"
	lbNamespace    = "envoy.lb"
	subsetNS       = "envoy.lb.subset_hint"
	// The prefill endpoint, host:port, where llm-d's P/D routing sidecar
	// (beside each decode pod) reads it: it sends the prompt there first,
	// then decodes locally with the KV cache the prefill pod hands over.
	prefillHeader = "x-prefiller-host-port"
	// The request's id in eldr, for an engine that pushes the request's real
	// footprint to eldrd after prefill (the daemon learns from it).
	requestIDHeader = "x-eldr-request-id"
)

// streamedChunk bounds one body chunk the picker streams back (Envoy's
// default per-message buffer is 64 KiB).
const streamedChunk = 62 << 10

type bodyMode int

const (
	fullDuplex bodyMode = iota
	buffered
	noBody // Envoy sends no request body: pick at the headers, by load
)

func parseBodyMode(s string) (bodyMode, error) {
	switch s {
	case "full-duplex":
		return fullDuplex, nil
	case "buffered":
		return buffered, nil
	}
	return 0, errors.New("body mode is full-duplex or buffered")
}

func modeOf(m filterv3.ProcessingMode_BodySendMode, fallback bodyMode) bodyMode {
	switch m {
	case filterv3.ProcessingMode_NONE:
		return noBody
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return fullDuplex
	case filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL,
		filterv3.ProcessingMode_STREAMED:
		return buffered
	}
	return fallback
}

// server is the ext_proc service.
type server struct {
	extprocv3.UnimplementedExternalProcessorServer
	picker  *Picker
	config  func() *Config
	mode    bodyMode
	maxBody int
	// buffered: request body bytes all streams hold now, at most maxBuffered
	// (beyond it a request is shed with 429, as the protocol says for load).
	buffered    atomic.Int64
	maxBuffered int64
	m           *metrics
	// onPick, when set, sees every pick's time in the picker (the bench).
	onPick func(time.Duration)
}

// stream is one HTTP request's exchange.
type stream struct {
	s         *server
	srv       extprocv3.ExternalProcessor_ProcessServer
	reqMode   bodyMode
	respMode  bodyMode
	requestID string
	start     time.Time // request headers received
	subset    []string
	hasSubset bool
	body      []byte
	held      int64 // of body, counted in server.buffered
	decided   bool
	pick      *pick
	status    string // the response's :status
	ended     bool   // the response ended (end of stream seen)
}

// errStop ends a stream after an ImmediateResponse.
var errStop = errors.New("stop")

func (s *server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, srv: srv, reqMode: s.mode, respMode: s.mode}
	defer st.finish() // whatever ends the stream (a stop included) releases the pick
	for {
		req, err := srv.Recv()
		if err == io.EOF || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			s.m.streamErrors.Inc()
			return err
		}
		if err := st.handle(req); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			s.m.streamErrors.Inc()
			return err
		}
	}
}

func (st *stream) finish() {
	st.dropBody()
	if st.pick == nil {
		return
	}
	outcome := "cancelled"
	if st.ended {
		outcome = "completed"
		if strings.HasPrefix(st.status, "5") {
			outcome = "upstream_error"
		}
	}
	st.pick.release(outcome)
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) error {
	if pc := req.GetProtocolConfig(); pc != nil {
		st.reqMode = modeOf(pc.GetRequestBodyMode(), st.reqMode)
		st.respMode = modeOf(pc.GetResponseBodyMode(), st.respMode)
	}
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		st.start = time.Now()
		st.requestHeaders(req, v.RequestHeaders)
		if v.RequestHeaders.GetEndOfStream() || st.reqMode == noBody {
			return st.decide(nil)
		}
		if st.reqMode == buffered {
			return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}})
		}
		return nil
	case *extprocv3.ProcessingRequest_RequestBody:
		b := v.RequestBody
		if st.decided { // the rest of a partially buffered body
			if st.reqMode == buffered {
				return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
					RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}})
			}
			return st.sendRequestBody(b.GetBody(), b.GetEndOfStream())
		}
		if len(st.body)+len(b.GetBody()) > st.s.maxBody {
			return st.reject(refuse(413, "too_large", "request body over %d bytes", st.s.maxBody))
		}
		if n := int64(len(b.GetBody())); st.s.buffered.Add(n) > st.s.maxBuffered {
			st.s.buffered.Add(-n)
			return st.reject(refuse(429, "overloaded",
				"the picker holds %d bytes of request bodies; retry later", st.s.maxBuffered))
		}
		st.held += int64(len(b.GetBody()))
		st.body = append(st.body, b.GetBody()...)
		if b.GetEndOfStream() || st.reqMode == buffered {
			return st.decide(st.body)
		}
		return nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !st.decided {
			if err := st.decide(st.body); err != nil {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		h := v.ResponseHeaders
		st.status = header(h.GetHeaders(), ":status")
		if st.pick != nil {
			st.pick.servedBy(metadataString(req.GetMetadataContext(), lbNamespace, servedKey))
			st.pick.prefillDone()
		}
		if h.GetEndOfStream() {
			st.responseEnded()
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := v.ResponseBody
		if b.GetEndOfStream() {
			st.responseEnded()
		}
		if st.respMode == fullDuplex { // (noBody: no response body is sent at all)
			return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{Response: streamed(b.GetBody(), b.GetEndOfStream())}}})
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}})
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		st.responseEnded()
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return status.Errorf(codes.InvalidArgument, "unknown ext_proc request %T", req.Request)
}

// responseEnded releases the pick at once: the stream may linger.
func (st *stream) responseEnded() {
	st.ended = true
	if st.pick != nil {
		st.finish()
	}
}

func (st *stream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) {
	st.requestID = header(h.GetHeaders(), "x-request-id")
	fields := req.GetMetadataContext().GetFilterMetadata()[subsetNS].GetFields()
	if v, ok := fields[subsetKey]; ok {
		st.hasSubset = true
		st.subset = []string{}
		switch x := v.GetKind().(type) {
		case *structpb.Value_ListValue:
			for _, e := range x.ListValue.GetValues() {
				st.subset = append(st.subset, strings.TrimSpace(e.GetStringValue()))
			}
		case *structpb.Value_StringValue:
			for _, e := range strings.Split(x.StringValue, ",") {
				st.subset = append(st.subset, strings.TrimSpace(e))
			}
		}
	}
}

// decide picks for the request (body nil: it has none) and answers.
func (st *stream) decide(body []byte) error {
	st.decided = true
	var prompt *parsed
	if body != nil {
		p, err := parseBody(body)
		if err != nil {
			return st.reject(err)
		}
		if cfg := st.s.config(); cfg != nil && !cfg.modelServed(p.model) {
			return st.reject(refuse(404, "unknown_model", "model %q is not served by this pool", p.model))
		}
		prompt = p
	}
	var subset []string
	if st.hasSubset {
		subset = st.subset
	}
	var pk *pick
	var err error
	if prompt != nil {
		pk, err = st.s.picker.Pick(st.srv.Context(), &prompt.prompt, subset)
	} else {
		pk, err = st.s.picker.Pick(st.srv.Context(), nil, subset)
	}
	if err != nil {
		return st.reject(refuse(503, "no_endpoint", "no ready endpoint to pick from"))
	}
	st.pick = pk
	defer st.dropBody() // after it is streamed back
	mutation := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(destinationKey, pk.destination())}}
	if pk.prefill != nil {
		mutation.SetHeaders = append(mutation.SetHeaders, setHeader(prefillHeader, pk.prefill.Address))
	}
	if pk.byEldr {
		mutation.SetHeaders = append(mutation.SetHeaders, setHeader(requestIDHeader, pk.key))
	}
	meta := &structpb.Struct{Fields: map[string]*structpb.Value{
		lbNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			destinationKey: structpb.NewStringValue(pk.destination())}})}}
	if body == nil || st.reqMode == buffered {
		common := &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}
		resp := &extprocv3.ProcessingResponse{DynamicMetadata: meta}
		if body == nil {
			resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}}
		} else {
			resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}
		}
		defer st.picked()
		return st.send(resp)
	}
	if err := st.send(&extprocv3.ProcessingResponse{DynamicMetadata: meta,
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}}}}); err != nil {
		return err
	}
	st.picked()
	return st.sendRequestBody(body, true)
}

// dropBody returns the body's bytes to the picker's budget.
func (st *stream) dropBody() {
	st.s.buffered.Add(-st.held)
	st.held, st.body = 0, nil
}

// picked: the pick is on its way to the proxy.
func (st *stream) picked() {
	d := time.Since(st.start)
	st.s.m.pickSeconds.Observe(d.Seconds())
	if st.s.onPick != nil {
		st.s.onPick(d)
	}
}

// sendRequestBody streams the body back unchanged (full duplex), in chunks.
func (st *stream) sendRequestBody(body []byte, end bool) error {
	for first := true; first || len(body) > 0; first = false {
		n := min(len(body), streamedChunk)
		last := n == len(body)
		if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: streamed(body[:n], end && last)}}}); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

func streamed(body []byte, end bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: body, EndOfStream: end}}}}
}

// reject answers the request itself, with an OpenAI-style error body.
func (st *stream) reject(err error) error {
	var br *badRequest
	if !errors.As(err, &br) {
		br = refuse(500, "internal", "%v", err)
	}
	st.s.m.rejected.WithLabelValues(br.reason).Inc()
	st.s.m.log.Info("request refused", "request_id", st.requestID, "code", br.code,
		"reason", br.reason, "error", br.msg)
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": br.msg, "type": br.reason, "code": br.code}})
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(br.code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
			Body:    body,
			Details: "eldr-epp: " + br.reason,
		}}}); err != nil {
		return err
	}
	return errStop
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error { return st.srv.Send(r) }

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// header: Envoy sends values in raw_value (value for older versions).
func header(m *corev3.HeaderMap, key string) string {
	for _, h := range m.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			if len(h.GetRawValue()) > 0 {
				return string(h.GetRawValue())
			}
			return h.GetValue()
		}
	}
	return ""
}

func metadataString(md *corev3.Metadata, ns, key string) string {
	return md.GetFilterMetadata()[ns].GetFields()[key].GetStringValue()
}
