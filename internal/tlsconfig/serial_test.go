package tlsconfig

import (
	"google.golang.org/grpc/credentials"
)

func tlsInfoSerial(a credentials.AuthInfo) string {
	info, ok := a.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	return info.State.PeerCertificates[0].SerialNumber.String()
}
