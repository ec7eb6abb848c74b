import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

/**
 * Kafka's own assignors on groups read as JSON from standard input; their assignments written
 * as JSON to standard output. The test suite's oracle (tests/kafka_oracle.py).
 *
 * Input: {"cases": [{"id", "assignor", "topics": {name: {"count": n, "racks": [[rack, ...], ...]}},
 *          "members": [{"id", "topics": [...], "instance_id", "rack", "owned": [[topic, p], ...],
 *                       "generation"}]}]}
 * where "assignor" is a client one (range, roundrobin, sticky, cooperative-sticky: called as a
 * group leader calls it) or a server one (uniform, server-range: called as the broker's
 * coordinator calls it, "owned" being each member's current target assignment).
 * Output, to the file named by the first argument: [{"id", "assignment": {member: [[topic, p], ...]}} or {"id", "error"}].
 */
public final class KafkaAssignors {
    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        InputStream in = System.in;
        JsonNode root = json.readTree(in);
        ArrayNode out = json.createArrayNode();
        for (JsonNode c : root.get("cases")) {
            ObjectNode result = json.createObjectNode();
            result.put("id", c.get("id").asText());
            CURRENT_TOPICS = c.get("topics");
            try {
                String assignor = c.get("assignor").asText();
                Map<String, List<TopicPartition>> assignment =
                    assignor.equals("uniform") || assignor.equals("server-range") ? server(c, assignor) : client(c, assignor);
                ObjectNode members = json.createObjectNode();
                for (Map.Entry<String, List<TopicPartition>> e : new TreeMap<>(assignment).entrySet()) {
                    ArrayNode list = json.createArrayNode();
                    e.getValue().stream()
                        .sorted(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition))
                        .forEach(tp -> list.add(json.createArrayNode().add(tp.topic()).add(tp.partition())));
                    members.set(e.getKey(), list);
                }
                result.set("assignment", members);
                if (BROKER_ORDER.containsKey(c.get("id").asText())) {
                    ObjectNode held = json.createObjectNode();
                    BROKER_ORDER.get(c.get("id").asText()).forEach((m, tps) -> {
                        ArrayNode list = json.createArrayNode();
                        tps.forEach(tp -> list.add(json.createArrayNode().add(tp.topic()).add(tp.partition())));
                        held.set(m, list);
                    });
                    result.set("broker_order", held);
                    ArrayNode order = json.createArrayNode();
                    DESCRIBE_ORDER.get(c.get("id").asText()).forEach(order::add);
                    result.set("describe_order", order);
                }
            } catch (Exception e) {
                result.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            out.add(result);
        }
        // to a file: Kafka's assignors log to standard output
        json.writeValue(new java.io.File(args[0]), out);
    }

    static Optional<String> text(JsonNode node, String field) {
        return node.hasNonNull(field) ? Optional.of(node.get(field).asText()) : Optional.empty();
    }

    static List<TopicPartition> owned(JsonNode member) {
        List<TopicPartition> owned = new ArrayList<>();
        if (member.hasNonNull("owned")) {
            for (JsonNode tp : member.get("owned")) owned.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt()));
        }
        return owned;
    }

    static List<String> racks(JsonNode topic, int partition) {
        List<String> racks = new ArrayList<>();
        if (topic.hasNonNull("racks")) for (JsonNode r : topic.get("racks").get(partition)) racks.add(r.asText());
        return racks;
    }

    /** A client assignor, called as a group leader calls it: the metadata and every member's Subscription. */
    static Map<String, List<TopicPartition>> client(JsonNode c, String name) throws Exception {
        ConsumerPartitionAssignor assignor;
        switch (name) {
            case "range": assignor = new RangeAssignor(); break;
            case "roundrobin": assignor = new RoundRobinAssignor(); break;
            case "sticky": assignor = new StickyAssignor(); break;
            case "cooperative-sticky": assignor = new CooperativeStickyAssignor(); break;
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
        // one broker per rack, holding the replicas of the partitions on that rack
        Map<String, Node> nodes = new TreeMap<>();
        List<PartitionInfo> partitions = new ArrayList<>();
        Node rackless = new Node(0, "localhost", 9092);
        c.get("topics").fields().forEachRemaining(t -> {
            for (int p = 0; p < t.getValue().get("count").asInt(); p++) {
                List<Node> replicas = new ArrayList<>();
                for (String rack : racks(t.getValue(), p)) {
                    replicas.add(nodes.computeIfAbsent(rack, r -> new Node(nodes.size() + 1, "localhost", 9093, r)));
                }
                if (replicas.isEmpty()) replicas.add(rackless);
                Node[] array = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(t.getKey(), p, array[0], array, array));
            }
        });
        List<Node> all = new ArrayList<>(nodes.values());
        all.add(rackless);
        Cluster cluster = new Cluster("oracle", all, partitions, Collections.emptySet(), Collections.emptySet());
        Method userData = StickyAssignor.class.getDeclaredMethod("serializeTopicPartitionAssignment",
                                                                 AbstractStickyAssignor.MemberData.class);
        userData.setAccessible(true);
        Map<String, ConsumerPartitionAssignor.Subscription> subscriptions = new HashMap<>();
        for (JsonNode m : c.get("members")) {
            List<String> topics = new ArrayList<>();
            for (JsonNode t : m.get("topics")) topics.add(t.asText());
            List<TopicPartition> owned = owned(m);
            int generation = m.hasNonNull("generation") ? m.get("generation").asInt() : -1;
            Optional<String> rack = text(m, "rack");
            ByteBuffer data = null;
            if (name.equals("sticky") && m.hasNonNull("owned")) {
                // what a Java consumer on StickyAssignor sends: its last assignment and generation
                data = (ByteBuffer) userData.invoke(null, new AbstractStickyAssignor.MemberData(
                    owned, generation < 0 ? Optional.empty() : Optional.of(generation)));
            }
            ConsumerPartitionAssignor.Subscription s =
                new ConsumerPartitionAssignor.Subscription(topics, data, owned, generation, rack);
            s.setGroupInstanceId(text(m, "instance_id"));
            subscriptions.put(m.get("id").asText(), s);
        }
        ConsumerPartitionAssignor.GroupAssignment done =
            assignor.assign(cluster, new ConsumerPartitionAssignor.GroupSubscription(subscriptions));
        Map<String, List<TopicPartition>> result = new HashMap<>();
        done.groupAssignment().forEach((member, a) -> result.put(member, a.partitions()));
        return result;
    }

    /** A topic's id: the case's ("id", as Kafka prints a Uuid), else the MD5 of its name, as
     * spark_assign.ordering.default_topic_id derives it. */
    static Uuid topicId(String name) {
        JsonNode given = CURRENT_TOPICS == null ? null : CURRENT_TOPICS.get(name);
        if (given != null && given.hasNonNull("id")) return Uuid.fromString(given.get("id").asText());
        try {
            ByteBuffer b = ByteBuffer.wrap(java.security.MessageDigest.getInstance("MD5")
                .digest(name.getBytes(StandardCharsets.UTF_8)));
            return new Uuid(b.getLong(), b.getLong());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The topics of the case being run (their ids). */
    static JsonNode CURRENT_TOPICS;

    /** Each member's position in the coordinator's member map, per case (the order
     * ConsumerGroupDescribe lists the members), and each member's target in the order the
     * broker holds it once the target's record is replayed (Assignment.fromRecord). */
    static final Map<String, List<String>> DESCRIBE_ORDER = new HashMap<>();
    static final Map<String, Map<String, List<TopicPartition>>> BROKER_ORDER = new HashMap<>();

    /**
     * A server assignor, called as the coordinator calls it (GroupMetadataManager's
     * maybeUpdateTargetAssignment and TargetAssignmentBuilder.build): the group's members in a
     * TimelineHashMap, inserted in the case's order but for a member marked "joining", which
     * an OverlayMap adds (the member whose heartbeat computes the target); the member specs in a
     * HashMap filled in that map's order; each member's current target as the broker holds it
     * after replaying its record (Assignment.fromRecord, the "owned" list's order); subscribed
     * topic ids in the order TopicIds yields them (the names' HashSet, resolved).
     */
    static Map<String, List<TopicPartition>> server(JsonNode c, String name) {
        ConsumerGroupPartitionAssignor assignor = name.equals("uniform") ? new UniformAssignor()
            : new org.apache.kafka.coordinator.group.assignor.RangeAssignor();
        CURRENT_TOPICS = c.get("topics");
        Map<Uuid, String> names = new HashMap<>();
        Map<Uuid, JsonNode> topics = new HashMap<>();
        c.get("topics").fields().forEachRemaining(t -> {
            names.put(topicId(t.getKey()), t.getKey());
            topics.put(topicId(t.getKey()), t.getValue());
        });
        org.apache.kafka.timeline.SnapshotRegistry registry =
            new org.apache.kafka.timeline.SnapshotRegistry(new org.apache.kafka.common.utils.internals.LogContext());
        org.apache.kafka.timeline.TimelineHashMap<String, MemberSubscriptionAndAssignmentImpl> group =
            new org.apache.kafka.timeline.TimelineHashMap<>(registry, 0);
        org.apache.kafka.coordinator.group.util.OverlayMap<String, MemberSubscriptionAndAssignmentImpl> view =
            new org.apache.kafka.coordinator.group.util.OverlayMap<>(group);
        Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
        Set<Set<String>> subscriptions = new HashSet<>();
        for (JsonNode m : c.get("members")) {
            String id = m.get("id").asText();
            List<String> topicNames = new ArrayList<>();
            for (JsonNode t : m.get("topics")) topicNames.add(t.asText());
            // TopicIds: the names' HashSet (ConsumerGroupMember.Builder), each resolved, unknown ones skipped
            Set<Uuid> subscribed = new LinkedHashSet<>();
            for (String t : new HashSet<>(topicNames)) if (topics.containsKey(topicId(t))) subscribed.add(topicId(t));
            subscriptions.add(new HashSet<>(topicNames));
            // the current target as ConsumerGroupTargetAssignmentMemberValue lists it, replayed
            Map<Uuid, List<Integer>> record = new LinkedHashMap<>();
            for (TopicPartition tp : owned(m)) {
                record.computeIfAbsent(topicId(tp.topic()), k -> new ArrayList<>()).add(tp.partition());
                inverted.computeIfAbsent(topicId(tp.topic()), k -> new HashMap<>()).put(tp.partition(), id);
            }
            Map<Uuid, Set<Integer>> current = new HashMap<>();
            record.forEach((t, ps) -> current.put(t, new HashSet<>(ps)));
            MemberSubscriptionAndAssignmentImpl spec = new MemberSubscriptionAndAssignmentImpl(
                text(m, "rack"), text(m, "instance_id"), subscribed, new Assignment(current));
            if (m.hasNonNull("joining") && m.get("joining").asBoolean()) view.put(id, spec);
            else group.put(id, spec);
        }
        List<String> describeOrder = new ArrayList<>();
        group.forEach((id, spec) -> describeOrder.add(id));
        DESCRIBE_ORDER.put(c.get("id").asText(), describeOrder);
        Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
        view.forEach(members::put);
        // the broker's subscription type: the same topic names for every member (ModernGroup)
        SubscriptionType type = subscriptions.size() <= 1 ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS;
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            public int numPartitions(Uuid topic) {
                return topics.containsKey(topic) ? topics.get(topic).get("count").asInt() : -1;
            }

            public Set<String> racksForPartition(Uuid topic, int partition) {
                return new HashSet<>(racks(topics.get(topic), partition));
            }
        };
        GroupAssignment done = assignor.assign(
            new GroupSpecImpl(Collections.unmodifiableMap(members), type, inverted), describer);
        Map<String, List<TopicPartition>> result = new HashMap<>();
        Map<String, List<TopicPartition>> held = new HashMap<>();
        for (Map.Entry<String, MemberAssignment> e : done.members().entrySet()) {
            List<TopicPartition> list = new ArrayList<>();
            e.getValue().partitions().forEach((t, ps) -> ps.forEach(p -> list.add(new TopicPartition(names.get(t), p))));
            result.put(e.getKey(), list);
            // the target's record lists the map as it iterates; replaying it builds the broker's copy
            Map<Uuid, Set<Integer>> replayed = new HashMap<>();
            e.getValue().partitions().forEach((t, ps) -> replayed.put(t, new HashSet<>(new ArrayList<>(ps))));
            List<TopicPartition> ordered = new ArrayList<>();
            replayed.forEach((t, ps) -> ps.forEach(p -> ordered.add(new TopicPartition(names.get(t), p))));
            held.put(e.getKey(), ordered);
        }
        BROKER_ORDER.put(c.get("id").asText(), held);
        return result;
    }
}
