package store

// flowSums sums a read's rows per edge (FlowRead without PerBucket):
// a row per edge and bucket in, a row per edge out.
//
// Looking each row's edge up in a map was the largest part of a map's
// first read after the wire (bench/flowmap: 500,000 minute rows of the
// last 5 minutes into 100,000 edges; a map of 100,000 keys misses the
// cache on most lookups). Two facts make most lookups unnecessary:
//
//   - rows of one node and one bucket are distinct edges (the primary
//     key), so while a node's rows are of one bucket, each is a new
//     edge: the map is not even built until some node's rows span two
//     buckets (a window of one hour bucket never builds it);
//   - PostgreSQL returns a bucket's rows of a node in the order they were
//     written, which is the edge's order (flowRowsOf sorts them), the
//     same in every bucket: the next row of a node is most often the
//     edge after the one its row before summed into. The caller checks
//     that guess (expect) against the row's bytes before decoding its
//     strings, and only a wrong guess looks the edge up.
//
// A wrong guess costs a lookup, never a wrong sum: the guess is compared
// key by key.
type flowSums struct {
	out  rowChunks
	keys []flowSumKey
	// place is each sum's index in its node's list.
	place []int32
	nodes map[int32]*nodeSums
	last  *nodeSums
	// at finds a sum by its edge; nil until some node's rows span two
	// buckets, then every sum's.
	at map[flowSumKey]int
}

// flowSumKey is a row's edge as its FlowRowKey, its strings by their
// number in the read (rawRow.istr): equal within one read.
type flowSumKey struct {
	node                int32
	role                FlowRole
	lport, pport, xport uint16
	owner, laddr, paddr uint32
	xaddr               uint32
}

// flowBucket is a row's bucket: its resolution and start.
type flowBucket struct {
	res int64
	ts  int64 // Unix seconds
}

// nodeSums is one node's part of a read's sums.
type nodeSums struct {
	id     int32
	bucket flowBucket // of the node's row before
	seen   bool
	// multi: the node's rows so far span more than one bucket, so a row
	// may be an edge already summed.
	multi bool
	list  []int // the node's sums, first seen first
	next  int   // where in list the next row is guessed to go
}

// node is the part of id, moved to bucket b.
func (s *flowSums) node(id int32, b flowBucket) *nodeSums {
	ns := s.last
	if ns == nil || ns.id != id {
		if s.nodes == nil {
			s.nodes = map[int32]*nodeSums{}
		}
		if ns = s.nodes[id]; ns == nil {
			ns = &nodeSums{id: id}
			s.nodes[id] = ns
		}
		s.last = ns
	}
	if !ns.seen || ns.bucket != b {
		if ns.seen {
			ns.multi = true
		}
		ns.seen, ns.bucket, ns.next = true, b, 0
	}
	return ns
}

// expect is the sum the next row of ns is guessed to add to, or nil: the
// caller checks the row's edge against it before calling hit.
func (s *flowSums) expect(ns *nodeSums) *FlowEdgeRow {
	if !ns.multi || ns.next >= len(ns.list) {
		return nil
	}
	return s.out.at(ns.list[ns.next])
}

// hit adds r to the sum expect returned; r's key strings may be unset.
func (s *flowSums) hit(ns *nodeSums, r *FlowEdgeRow) {
	sum := s.out.at(ns.list[ns.next])
	ns.next++
	r.Local.ID = sum.Local.ID
	addFlowRow(sum, r)
}

// add adds r, whose edge is k, to its sum, a new one if it is the first
// row of its edge.
func (s *flowSums) add(ns *nodeSums, k flowSumKey, r *FlowEdgeRow) {
	if ns.multi {
		if s.at == nil {
			s.at = make(map[flowSumKey]int, 2*len(s.keys))
			for i, k := range s.keys {
				s.at[k] = i
			}
		}
		if i, ok := s.at[k]; ok {
			addFlowRow(s.out.at(i), r)
			ns.next = int(s.place[i]) + 1
			return
		}
	}
	// A new edge: the guess stays where it was (a node's new edge among
	// the edges it had is one row, not a new order).
	i := s.out.add(*r)
	s.keys = append(s.keys, k)
	s.place = append(s.place, int32(len(ns.list)))
	ns.list = append(ns.list, i)
	if s.at != nil {
		s.at[k] = i
	}
}

// addFlowRow adds r to sum, a sum of the same edge.
func addFlowRow(sum, r *FlowEdgeRow) {
	if r.First.Before(sum.First) {
		sum.First = r.First
	}
	if r.End.After(sum.End) {
		sum.End = r.End
		sum.Local = r.Local // the newest bucket's names
	}
	sum.EdgesFolded += r.EdgesFolded
	sum.HoldersLeftOut += r.HoldersLeftOut
	sum.Add(r.FlowCounters)
}
