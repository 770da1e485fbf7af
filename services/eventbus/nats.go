package eventbus

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// StartEmbeddedNATS starts a nats-server with JetStream on 127.0.0.1:port
// (-1 picks a free port), storing JetStream files under storeDir, and waits
// until it accepts connections. It fails fast when the server reports a fatal
// error (a port in use, an unusable store). The caller owns it: Shutdown,
// then WaitForShutdown. Its own log goes to log at debug level, warnings and
// errors at their levels.
func StartEmbeddedNATS(storeDir string, port int, log *slog.Logger) (*natsserver.Server, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "switchyard-eventbus-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	nl := natsLogger{log: log.With("component", "nats-server"), fatal: make(chan string, 1)}
	ns.SetLoggerV2(nl, false, false, false)
	ns.Start()
	fail := func(why string) (*natsserver.Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server on 127.0.0.1:%d with store %s: %s", port, storeDir, why)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-nl.fatal:
			return fail(msg)
		default:
		}
		if time.Now().After(deadline) {
			return fail("not ready after 30s")
		}
	}
	return ns, nil
}

// natsLogger adapts nats-server's printf logger to slog. Fatal messages also
// go to fatal, since nats-server does not stop on them when embedded.
type natsLogger struct {
	log   *slog.Logger
	fatal chan string
}

// Noticef implements natsserver.Logger; notices are debug-level here.
func (l natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }

// Warnf implements natsserver.Logger.
func (l natsLogger) Warnf(format string, v ...any) { l.log.Warn(fmt.Sprintf(format, v...)) }

// Errorf implements natsserver.Logger.
func (l natsLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }

// Debugf implements natsserver.Logger; the server's debug output is dropped.
func (l natsLogger) Debugf(format string, v ...any) {}

// Tracef implements natsserver.Logger; the server's traces are dropped.
func (l natsLogger) Tracef(format string, v ...any) {}

// Fatalf implements natsserver.Logger.
func (l natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}

// embeddedStoreDir is where the embedded nats-server keeps JetStream.
func embeddedStoreDir(dataDir string) string { return filepath.Join(dataDir, "nats") }

// connectNATS connects to url with the configured credentials, reconnecting
// forever and buffering publishes while disconnected. With embedded set, it
// connects to that server in process, without a socket.
func connectNATS(cfg Config, url string, embedded *natsserver.Server, log *slog.Logger) (*nats.Conn, error) {
	maxReconnects, wait, buf := cfg.maxReconnects(), cfg.NATSReconnectWait, cfg.NATSReconnectBuffer
	if wait == 0 {
		wait = DefaultNATSReconnectWait
	}
	if buf == 0 {
		buf = DefaultNATSReconnectBuffer
	}
	opts := []nats.Option{
		nats.Name("switchyard-eventbus"),
		nats.MaxReconnects(maxReconnects),
		nats.ReconnectWait(wait),
		nats.ReconnectBufSize(buf),
		nats.ReconnectJitter(wait/2, wait/2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				log.Warn("NATS disconnected; reconnecting", "err", err.Error())
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("NATS async error", "subject", subject, "err", err.Error())
		}),
	}
	if embedded != nil {
		opts = append(opts, nats.InProcessServer(embedded))
	}
	switch {
	case cfg.NATSCreds != "":
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	case cfg.NATSToken != "":
		opts = append(opts, nats.Token(cfg.NATSToken))
	}
	if cfg.NATSUser != "" {
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if embedded == nil && cfg.NATSTLS.Enabled() {
		tc, err := cfg.NATSTLS.ClientTLS()
		if err != nil {
			return nil, fmt.Errorf("NATS TLS: %w", err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	return nc, nil
}
