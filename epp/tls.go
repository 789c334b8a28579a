package main

// Secure serving, as GIE's own picker does it: gateways reach the picker's
// ext_proc over TLS. The certificate is -cert-path's tls.crt and tls.key
// (a Kubernetes TLS secret mounted there), or else a self-signed one made
// at start (the gateways that GIE documents skip verifying it).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"path/filepath"
	"time"
)

func serverCertificate(certPath string) (tls.Certificate, error) {
	if certPath != "" {
		c, err := tls.LoadX509KeyPair(filepath.Join(certPath, "tls.crt"), filepath.Join(certPath, "tls.key"))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("-cert-path %s: %w", certPath, err)
		}
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "eldr-epp", Organization: []string{"eldr"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
