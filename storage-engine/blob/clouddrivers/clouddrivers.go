// Package clouddrivers links the gocloud bucket drivers for s3:// (AWS S3,
// MinIO and other S3-compatible stores), gs:// and azblob://.
package clouddrivers

import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)
