package maint

import "github.com/maintkit/maint/internal/resp"

// clusterState is what the Maints of one cluster's node clients share: a
// cluster's maintenance (SMIGRATING, SMIGRATED) concerns the slot map, which
// belongs to the ClusterClient, not to any one node client.
type clusterState struct {
	// reload marks the ClusterClient's slot map for reload; nil when the
	// ClusterClient is not known.
	reload func()
}

// onSMigrated handles an SMIGRATED read on a connection of one of the
// cluster's node clients.
func (cs *clusterState) onSMigrated(_ *Maint, _ *conn, _ resp.Notification) {
	if cs.reload != nil {
		cs.reload()
	}
}
