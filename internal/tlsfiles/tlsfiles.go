// Package tlsfiles builds the TLS configurations of the agent→collector
// stream from PEM files, shared deliberately by both sides so they agree on
// versions and on what mutual TLS means.
//
// Certificates, keys and the collector's client CA are read again when
// their files change (checked at each handshake), so a rotated certificate
// — by cert-manager, by a cron job running deploy/tls/nbs-certs — is used by
// the next connection without a restart. Files that do not load (a
// certificate replaced before its key) leave the previous ones in use.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/nbs-project/nbs/internal/reload"
)

// Server is the collector side: its certificate and, when clientCAFile is
// set, mutual TLS — every agent must present a certificate signed by it.
func Server(certFile, keyFile, clientCAFile string, log *slog.Logger) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS certificate needs both a certificate and a key file")
	}
	cert, err := keyPair(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Get(), nil }}
	if clientCAFile == "" {
		return cfg, nil
	}
	cas, err := reload.New(func() (*x509.CertPool, error) { return pool(clientCAFile) }, log, clientCAFile)
	if err != nil {
		return nil, err
	}
	// The client CA is a field of the config, not a callback, so each
	// handshake gets a config for the CA in force; one is built per CA pool.
	var mu sync.Mutex
	var forPool *x509.CertPool
	var current *tls.Config
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		p := cas.Get()
		mu.Lock()
		defer mu.Unlock()
		if p != forPool {
			c := cfg.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs, c.ClientAuth = p, tls.RequireAndVerifyClientCert
			forPool, current = p, c
		}
		return current, nil
	}
	// Also set on the config itself, for callers that read it directly.
	cfg.ClientCAs, cfg.ClientAuth = cas.Get(), tls.RequireAndVerifyClientCert
	return cfg, nil
}

// Client is the agent side: the CA to verify the collector with (empty:
// the system's roots), an optional client certificate for mutual TLS, and
// an optional server name when the address is not the certificate's name.
func Client(caFile, certFile, keyFile, serverName string, log *slog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		p, err := pool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = p
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := keyPair(certFile, keyFile, log)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.Get(), nil }
	case certFile != "" || keyFile != "":
		return nil, errors.New("a TLS client certificate needs both a certificate and a key file")
	}
	return cfg, nil
}

func keyPair(certFile, keyFile string, log *slog.Logger) (*reload.Files[*tls.Certificate], error) {
	load := func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS certificate %s / key %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}
	return reload.New(load, log, certFile, keyFile)
}

func pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return p, nil
}
