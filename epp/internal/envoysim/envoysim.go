// Package envoysim plays Envoy's part of the Endpoint Picker Protocol for
// the picker's tests, demo and benchmark (where no Envoy binary is
// installed): per HTTP request one ext_proc stream over real gRPC, sending
// what Envoy's ext_proc filter sends with request and response body modes
// FULL_DUPLEX_STREAMED (GIE's configuration) — request headers with the
// subset hint, the body in chunks, then the response's headers and body
// chunks as the upstream produces them, with end of stream — and, between
// the two, the upstream request to the picked endpoint (falling back down
// the list as Envoy's retry would).
package envoysim

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Proxy is the stand-in Envoy.
type Proxy struct {
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	HTTP   *http.Client
	Chunk  int // request body chunk size (Envoy's: up to its buffer, 64 KiB here)
}

// Dial connects to the picker's ext_proc address: over TLS with tlsConfig,
// in plaintext when it is nil.
func Dial(addr string, tlsConfig *tls.Config) (*Proxy, error) {
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	return &Proxy{conn: conn, client: extprocv3.NewExternalProcessorClient(conn),
		HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}, Chunk: 64 << 10}, nil
}

func (p *Proxy) Close() error { return p.conn.Close() }

// Request is one HTTP request through the proxy.
type Request struct {
	Path   string
	Body   []byte
	Subset []string // the subset hint (nil: none)
	// Forward sends it upstream to the pick; else the proxy answers the
	// response phase itself (200, one small body) as if upstream had.
	Forward bool
	// CancelAfter > 0: the client goes away after that many response body
	// chunks (the stream is reset, as Envoy resets it on a downstream reset).
	CancelAfter int
	// HoldResponse keeps the stream open after the pick until the returned
	// Result's Finish is called (tests of in-flight counts and of ordering).
	HoldResponse bool
	// BodyMode is the ext_proc filter's request body mode as Envoy announces
	// it: "" (FULL_DUPLEX_STREAMED, GIE's), "buffered" (the header response
	// comes first, then the whole body in one message) or "none" (Envoy
	// sends no body).
	BodyMode string
}

// Result is what came back.
type Result struct {
	Destination []string          // the pick, then the fallbacks
	Prefill     string            // x-prefiller-host-port, where set
	Metadata    string            // the dynamic metadata's destination (must equal the header)
	Headers     map[string]string // every header the pick set
	Immediate   *extprocv3.ImmediateResponse
	PickLatency time.Duration // first request message sent to the header response
	Served      string        // the endpoint that answered (Forward)
	Status      int           // upstream status (Forward)
	Chunks      int           // response body chunks relayed
	Body        []byte        // the request body as the picker streamed it back
	// Finish ends a held request: its response phase, then the stream.
	Finish func() error
}

// Do runs one request.
func (p *Proxy) Do(ctx context.Context, r Request) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := p.client.Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	res := &Result{}
	start := time.Now()
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if r.Subset != nil {
		vals := make([]any, len(r.Subset))
		for i, s := range r.Subset {
			vals[i] = s
		}
		s, _ := structpb.NewStruct(map[string]any{"x-gateway-destination-endpoint-subset": vals})
		md.FilterMetadata["envoy.lb.subset_hint"] = s
	}
	reqMode := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	switch r.BodyMode {
	case "buffered":
		reqMode = filterv3.ProcessingMode_BUFFERED
	case "none":
		reqMode = filterv3.ProcessingMode_NONE
	}
	err = stream.Send(&extprocv3.ProcessingRequest{
		MetadataContext: md,
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: reqMode,
			ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "POST", ":path", r.Path, "content-type", "application/json",
				"x-request-id", fmt.Sprintf("envoysim-%d", start.UnixNano())),
			EndOfStream: len(r.Body) == 0}}})
	if err == nil && len(r.Body) > 0 && r.BodyMode != "" {
		return p.doBuffered(ctx, cancel, stream, r, res, start)
	}
	body := r.Body
	for err == nil && len(body) > 0 {
		n := min(len(body), p.Chunk)
		err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[:n], EndOfStream: n == len(body)}}})
		body = body[n:]
	}
	if err != nil && !errors.Is(err, io.EOF) { // EOF: the picker answered early (Recv has it)
		cancel()
		return nil, fmt.Errorf("sending the request: %w", err)
	}
	// The header response (or an immediate one), then the body streamed back.
	resp, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("waiting for the pick: %w", err)
	}
	res.PickLatency = time.Since(start)
	if im := resp.GetImmediateResponse(); im != nil {
		res.Immediate = im
		stream.CloseSend()
		drain(stream)
		cancel()
		return res, nil
	}
	h := resp.GetRequestHeaders()
	if h == nil {
		cancel()
		return nil, fmt.Errorf("expected the request header response, got %T", resp.Response)
	}
	readPick(resp, h.GetResponse(), res)
	for len(r.Body) > 0 {
		resp, err = stream.Recv()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("waiting for the body: %w", err)
		}
		sb := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			cancel()
			return nil, fmt.Errorf("expected a streamed body response, got %T", resp.Response)
		}
		res.Body = append(res.Body, sb.GetBody()...)
		if sb.GetEndOfStream() {
			break
		}
	}
	return p.responsePhase(ctx, cancel, stream, r, res)
}

// responsePhase plays the response (forwarded upstream, or answered here),
// then ends the stream; held requests get it as Finish.
func (p *Proxy) responsePhase(ctx context.Context, cancel context.CancelFunc,
	stream extprocv3.ExternalProcessor_ProcessClient, r Request, res *Result) (*Result, error) {
	finish := func() error {
		defer cancel()
		var err error
		if r.Forward {
			err = p.forward(ctx, cancel, stream, r, res)
		} else {
			err = respond(stream, "200", []byte(`{"choices":[]}`))
		}
		if err != nil {
			return err
		}
		stream.CloseSend()
		drain(stream)
		return nil
	}
	if r.HoldResponse {
		res.Finish = finish
		return res, nil
	}
	return res, finish()
}

// doBuffered is the exchange in BUFFERED mode (the header response first,
// then the whole body, the pick on the body response) and NONE mode (no body
// reaches the picker: the pick is on the header response).
func (p *Proxy) doBuffered(ctx context.Context, cancel context.CancelFunc,
	stream extprocv3.ExternalProcessor_ProcessClient, r Request, res *Result, start time.Time) (*Result, error) {
	fail := func(err error) (*Result, error) { cancel(); return nil, err }
	resp, err := stream.Recv()
	if err != nil {
		return fail(fmt.Errorf("waiting for the header response: %w", err))
	}
	if r.BodyMode == "buffered" {
		if resp.GetRequestHeaders() == nil {
			return fail(fmt.Errorf("expected the header response, got %T", resp.Response))
		}
		if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: r.Body, EndOfStream: true}}}); err != nil {
			return fail(err)
		}
		if resp, err = stream.Recv(); err != nil {
			return fail(fmt.Errorf("waiting for the body response: %w", err))
		}
	}
	res.PickLatency = time.Since(start)
	if im := resp.GetImmediateResponse(); im != nil {
		res.Immediate = im
		cancel()
		return res, nil
	}
	common := resp.GetRequestBody().GetResponse()
	if r.BodyMode == "none" {
		common = resp.GetRequestHeaders().GetResponse()
	}
	if common == nil {
		return fail(fmt.Errorf("expected the pick, got %T", resp.Response))
	}
	readPick(resp, common, res)
	res.Body = r.Body // unchanged: Envoy forwards its own buffer
	r.Forward = false // the response phase is played here, as Do without Forward does
	return p.responsePhase(ctx, cancel, stream, r, res)
}

// readPick takes the pick from the response that carries it: the headers it
// sets and the dynamic metadata.
func readPick(resp *extprocv3.ProcessingResponse, common *extprocv3.CommonResponse, res *Result) {
	res.Headers = map[string]string{}
	for _, o := range common.GetHeaderMutation().GetSetHeaders() {
		res.Headers[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
		switch o.GetHeader().GetKey() {
		case "x-gateway-destination-endpoint":
			res.Destination = strings.Split(string(o.GetHeader().GetRawValue()), ",")
		case "x-prefiller-host-port":
			res.Prefill = string(o.GetHeader().GetRawValue())
		}
	}
	res.Metadata = resp.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().
		GetFields()["x-gateway-destination-endpoint"].GetStringValue()
}

// respond plays a whole upstream response: headers, then one body chunk.
func respond(stream extprocv3.ExternalProcessor_ProcessClient, status string, body []byte) error {
	if err := exchange(stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", status,
			"content-type", "application/json")}}}); err != nil {
		return err
	}
	return exchange(stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
}

// forward sends the request upstream, down the destination list until one
// answers, and relays its response through the picker chunk by chunk.
func (p *Proxy) forward(ctx context.Context, cancel context.CancelFunc,
	stream extprocv3.ExternalProcessor_ProcessClient, r Request, res *Result) error {
	var resp *http.Response
	var err error
	for _, d := range res.Destination {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d+r.Path, bytes.NewReader(res.Body))
		req.Header.Set("content-type", "application/json")
		if res.Prefill != "" {
			req.Header.Set("x-prefiller-host-port", res.Prefill)
		}
		if resp, err = p.HTTP.Do(req); err == nil {
			res.Served = d
			break
		}
	}
	if err != nil {
		return fmt.Errorf("no destination answered: %w", err)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	served, _ := structpb.NewStruct(map[string]any{"x-gateway-destination-endpoint-served": res.Served})
	if err := exchange(stream, &extprocv3.ProcessingRequest{
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": served}},
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":status", fmt.Sprint(resp.StatusCode), "content-type", resp.Header.Get("content-type"))}}}); err != nil {
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			res.Chunks++
			if err := exchange(stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...)}}}); err != nil {
				return err
			}
			if r.CancelAfter > 0 && res.Chunks >= r.CancelAfter {
				cancel() // the downstream client went away: Envoy resets both
				return nil
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	return exchange(stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
}

// exchange sends one message and reads the picker's answer to it.
func exchange(stream extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) error {
	if err := stream.Send(m); err != nil {
		return err
	}
	_, err := stream.Recv()
	return err
}

func drain(stream extprocv3.ExternalProcessor_ProcessClient) {
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
	}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}
