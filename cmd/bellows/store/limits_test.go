package store

import (
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// TestRegionKeyLimitIsTheContracts: the region's key limit is a constant
// of its own; the client checks contract.MaxKeyBytes, so they must agree
// (the value and batch limits are passed to the region from the contract).
func TestRegionKeyLimitIsTheContracts(t *testing.T) {
	if region.MaxKeySize != contract.MaxKeyBytes {
		t.Fatalf("region.MaxKeySize = %d, contract.MaxKeyBytes = %d: the client would refuse keys the store takes or send keys it refuses",
			region.MaxKeySize, contract.MaxKeyBytes)
	}
}
