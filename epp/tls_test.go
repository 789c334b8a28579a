package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"eldr.dev/eldr/epp/internal/envoysim"
)

// Secure serving (GIE's default): ext_proc over TLS with a self-signed
// certificate; a plaintext client is refused; the health service also
// answers in plaintext on its own listener (Kubernetes probes).
func TestSecureServingWithASelfSignedCertificate(t *testing.T) {
	h := newHarness(t, decodeEngines(2), func(o *Options) { o.SecureServing = true })
	h.routerReady()
	r := synthRNG(21)
	if res := h.do(envoysim.Request{Body: textBody(&r, 0, false)}); res.Immediate != nil || len(res.Destination) == 0 {
		t.Fatalf("over TLS: %+v", res)
	}
	plain, err := envoysim.Dial(h.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := plain.Do(ctx, envoysim.Request{Path: "/v1/completions", Body: textBody(&r, 0, false)}); err == nil {
		t.Fatal("a plaintext client got a pick from a TLS picker")
	}
	conn, err := grpc.NewClient(h.health, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("plaintext health: %v %v", resp.GetStatus(), err)
	}
	h.noLeaks()
}

// -cert-path: the key pair of a mounted TLS secret, verified by the client.
func TestSecureServingWithACertificateFromCertPath(t *testing.T) {
	dir := t.TempDir()
	cert, err := serverCertificate("")
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}))
	writeFile(t, filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}))
	cfg := filepath.Join(dir, "endpoints.yaml")
	writeFile(t, cfg, []byte("endpoints: [{address: \"127.0.0.1:1\", metrics: none}]\n"))
	o := DefaultOptions()
	o.ConfigPath, o.Router, o.CertPath = cfg, "none", dir
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := newEPP(o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.Serve(Listeners{ExtProc: lis})
	defer e.Stop(time.Second)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	p, err := envoysim.Dial(lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := p.Do(ctx, envoysim.Request{Path: "/v1/completions", Body: []byte(`{"prompt":"hi"}`)})
	if err != nil || res.Immediate != nil || res.Destination[0] != "127.0.0.1:1" {
		t.Fatalf("verified TLS: %+v %v", res, err)
	}
	// A folder without the pair is refused at start, with the path named.
	o.CertPath = t.TempDir()
	if _, err := newEPP(o); err == nil {
		t.Error("a -cert-path without tls.crt and tls.key was accepted")
	}
}
