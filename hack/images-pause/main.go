// pause: the sandbox process of every pod on the real node. It holds the pod's namespaces
// and does nothing else until it is told to stop (the role of registry.k8s.io/pause).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	os.Exit(0)
}
