package maintotel

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

// The values of redis.client.errors.category the spec fixes.
const (
	CategoryNetwork = "network" // transport, DNS, socket
	CategoryTLS     = "tls"
	CategoryAuth    = "auth"
	CategoryServer  = "server" // Redis server errors, cluster errors included
	CategoryOther   = "other"
)

// ErrorAttributes maps an error maint returns or handles to the spec's
// error.type and redis.client.errors.category:
//
//	*maint.TimeoutError          maint.TimeoutError          network  a read or write timed out under maintenance
//	maint.ErrDrainCap            maint.ErrDrainCap           network  the connection was closed under the command
//	maint.ErrRetired             maint.ErrRetired            network  the connection was retired by a handoff
//	maint.ErrHeld                maint.ErrHeld               other    held for a replacement until its context ended
//	maint.ErrClosed              maint.ErrClosed             other    interrupted by Maint.Close
//	maint.ErrSuccessorRejected   maint.ErrSuccessorRejected  tls      when the successor's certificate did not verify,
//	                                                         other    when the policy refused it
//	a Redis error reply          its prefix (ERR, MOVED...)  server   (auth for NOAUTH, WRONGPASS, NOPERM)
//	another net.Error            its Go type                 network
//	anything else                its Go type                 other
//
// error.type is maint's name for its own errors (stable, low-cardinality),
// the status code for a server's, as the OTel database conventions do.
func ErrorAttributes(err error) (errorType, category string) {
	var te *maint.TimeoutError
	switch {
	case err == nil:
		return "", ""
	case errors.As(err, &te):
		return "maint.TimeoutError", CategoryNetwork
	case errors.Is(err, maint.ErrDrainCap):
		return "maint.ErrDrainCap", CategoryNetwork
	case errors.Is(err, maint.ErrRetired):
		return "maint.ErrRetired", CategoryNetwork
	case errors.Is(err, maint.ErrHeld):
		return "maint.ErrHeld", CategoryOther
	case errors.Is(err, maint.ErrClosed):
		return "maint.ErrClosed", CategoryOther
	case errors.Is(err, maint.ErrSuccessorRejected):
		if isTLS(err) {
			return "maint.ErrSuccessorRejected", CategoryTLS
		}
		return "maint.ErrSuccessorRejected", CategoryOther
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !isNet(err) {
		code := StatusCode(rerr.Error())
		switch code {
		case "NOAUTH", "WRONGPASS", "NOPERM":
			return code, CategoryAuth
		}
		return code, CategoryServer
	}
	if isTLS(err) {
		return fmt.Sprintf("%T", err), CategoryTLS
	}
	if isNet(err) {
		return fmt.Sprintf("%T", err), CategoryNetwork
	}
	return fmt.Sprintf("%T", err), CategoryOther
}

// StatusCode is the status code of a Redis error reply: its first word
// ("ERR", "WRONGTYPE", "MOVED"), or "ERR" when it has none.
func StatusCode(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.IndexByte(msg, ' '); i > 0 {
		msg = msg[:i]
	}
	if msg == "" || strings.ToUpper(msg) != msg {
		return "ERR"
	}
	return msg
}

func isNet(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

func isTLS(err error) bool {
	var (
		hn  x509.HostnameError
		ua  x509.UnknownAuthorityError
		ci  x509.CertificateInvalidError
		cve *tls.CertificateVerificationError
		rh  tls.RecordHeaderError
	)
	return errors.As(err, &hn) || errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &cve) || errors.As(err, &rh)
}
