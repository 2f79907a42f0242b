-- The address other nodes should ping to reach each node (Hello.ping_address;
-- empty: the node is not a ping peer). The collector draws each node's ping
-- peers from the nodes that announce one.
ALTER TABLE nodes ADD COLUMN ping_address text NOT NULL DEFAULT '';
