// The distribution registry with the filesystem storage driver alone, which the real
// node's registry uses (hack/realnode_registry.py): its own cmd/registry also links the
// Azure, GCS and S3 drivers, the pull-through proxy and three auth schemes.
package main

import (
	"github.com/distribution/distribution/v3/registry"

	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// RootCmd's two commands exit non-zero themselves on failure.
	_ = registry.RootCmd.Execute()
}
