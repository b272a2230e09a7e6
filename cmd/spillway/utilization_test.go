package main

import (
	"testing"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry/registryapi"
)

// The registry API counts the reports it refuses itself on the load
// table's metric: the result names it uses are the table's.
func TestUtilizationResultsAgree(t *testing.T) {
	var _ registryapi.UtilizationSink = (*load.UtilizationTable)(nil)
	for api, table := range map[string]string{
		registryapi.UtilizationInvalid:    load.UtilizationInvalid,
		registryapi.UtilizationWrongLease: load.UtilizationWrongLease,
	} {
		if api != table {
			t.Errorf("registryapi counts %q where load names the result %q", api, table)
		}
	}
}
