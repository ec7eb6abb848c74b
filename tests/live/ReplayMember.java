import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.LinkedBlockingQueue;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of a live replay (tests/live_replay.py): Kafka's Java consumer, driven by commands
 * on standard input, reporting on standard output as JSON lines with wall-clock times.
 *
 * <pre>
 * java ReplayMember member &lt;consumer.properties&gt; topic,topic...
 *   stdin:  go | close | subscribe topic,topic...
 *   stdout: {"ev": "ready"} once the consumer is built; {"ev": "joined", "t"} when it subscribed;
 *           {"ev": "assigned" | "revoked" | "lost", "t", "gen", "member", "tps": [[topic, p], ...]}
 *           from the rebalance callbacks; {"ev": "closing", "t"} and {"ev": "closed", "t"} around close()
 * java ReplayMember watch &lt;admin.properties&gt; group
 *   stdout: {"ev": "epoch", "t", "type", "group_epoch", "target_epoch", "members": [[client, epoch], ...]}
 *           whenever the group's description changes (ConsumerGroupDescribe, or DescribeGroups for
 *           a classic group: type CLASSIC, no epochs); stops on "close"
 * </pre>
 *
 * A crash is the driver's SIGKILL of the process: no callback, no LeaveGroup.
 */
public final class ReplayMember {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    static synchronized void emit(String ev, String rest) {
        OUT.println("{\"ev\": \"" + ev + "\", \"t\": " + System.currentTimeMillis() + (rest.isEmpty() ? "" : ", " + rest) + "}");
    }

    static String quoted(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static Properties load(String path) throws Exception {
        Properties p = new Properties();
        try (var in = new java.io.FileInputStream(path)) {
            p.load(in);
        }
        return p;
    }

    public static void main(String[] args) throws Exception {
        LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                    commands.add(line.trim());
                }
            } catch (Exception ignored) {
            }
            commands.add("close");  // the driver went away
        });
        reader.setDaemon(true);
        reader.start();
        if (args[0].equals("watch")) {
            watch(load(args[1]), args[2], commands);
        } else {
            member(load(args[1]), List.of(args[2].split(",")), commands);
        }
    }

    static void member(Properties config, List<String> topics, LinkedBlockingQueue<String> commands) throws Exception {
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            void report(String ev, Collection<TopicPartition> tps) {
                StringBuilder list = new StringBuilder("[");
                tps.stream().sorted(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition))
                    .forEach(tp -> list.append(list.length() > 1 ? ", " : "").append("[").append(quoted(tp.topic()))
                        .append(", ").append(tp.partition()).append("]"));
                var meta = consumer.groupMetadata();
                emit(ev, "\"gen\": " + meta.generationId() + ", \"member\": " + quoted(meta.memberId()) + ", \"tps\": " + list + "]");
            }

            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                report("revoked", tps);
            }

            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                report("assigned", tps);
            }

            public void onPartitionsLost(Collection<TopicPartition> tps) {
                report("lost", tps);
            }
        };
        // connected, its metadata and the client's classes loaded, its assignors' code warm: a join
        // costs what subscribing costs, and a leader's first assignment what a running consumer's does
        consumer.listTopics(Duration.ofSeconds(30));
        warmAssignors(config);
        emit("ready", "");
        while (!commands.take().equals("go")) {
        }
        consumer.subscribe(topics, listener);
        emit("joined", "");
        while (true) {
            consumer.poll(Duration.ofMillis(20));
            String command = commands.poll();
            if (command == null) {
                continue;
            }
            if (command.equals("close")) {
                emit("closing", "");
                consumer.close();
                emit("closed", "");
                System.exit(0);
            } else if (command.startsWith("subscribe ")) {
                consumer.subscribe(List.of(command.substring(10).split(",")), listener);
                emit("subscribed", "");
            }
        }
    }

    /** Each configured assignor run on a small group of its own, until the JIT has compiled it. */
    static void warmAssignors(Properties config) throws Exception {
        Object names = config.get("partition.assignment.strategy");
        if (names == null) {
            return;
        }
        List<PartitionInfo> partitions = new ArrayList<>();
        for (int p = 0; p < 24; p++) {
            partitions.add(new PartitionInfo("warm", p, null, new Node[0], new Node[0]));
        }
        Cluster cluster = new Cluster("warm", List.of(), partitions, Set.of(), Set.of());
        for (String name : names.toString().split(",")) {
            ConsumerPartitionAssignor assignor = (ConsumerPartitionAssignor) Class.forName(name.trim())
                .getDeclaredConstructor().newInstance();
            for (int round = 0; round < 300; round++) {
                Map<String, ConsumerPartitionAssignor.Subscription> members = new HashMap<>();
                for (int m = 0; m < 3 + round % 4; m++) {
                    List<TopicPartition> owned = new ArrayList<>();
                    for (int p = m; p < 24 && round % 2 == 1; p += 6) {
                        owned.add(new TopicPartition("warm", p));
                    }
                    members.put("m" + m, new ConsumerPartitionAssignor.Subscription(List.of("warm"), null, owned));
                }
                assignor.assign(cluster, new ConsumerPartitionAssignor.GroupSubscription(members));
            }
        }
    }

    static void watch(Properties config, String group, LinkedBlockingQueue<String> commands) throws Exception {
        try (Admin admin = Admin.create(config)) {
            emit("ready", "");
            String last = "";
            while (commands.poll() == null) {
                ConsumerGroupDescription d;
                try {
                    d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                } catch (Exception e) {
                    // before its first member: the coordinator answers that it knows no such group
                    if (e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException && last.isEmpty()) {
                        last = "none";
                        emit("epoch", "\"type\": \"none\", \"group_epoch\": -1, \"target_epoch\": -1, \"state\": \"none\", \"members\": []");
                    }
                    Thread.sleep(50);
                    continue;
                }
                StringBuilder members = new StringBuilder("[");
                d.members().stream().sorted(Comparator.comparing(MemberDescription::clientId)).forEach(m ->
                    members.append(members.length() > 1 ? ", " : "").append("[").append(quoted(m.clientId()))
                        .append(", ").append(m.memberEpoch().orElse(-1)).append("]"));
                String now = "\"type\": " + quoted(String.valueOf(d.type())) + ", \"group_epoch\": "
                    + d.groupEpoch().orElse(-1) + ", \"target_epoch\": "
                    + d.targetAssignmentEpoch().orElse(-1) + ", \"state\": " + quoted(String.valueOf(d.groupState()))
                    + ", \"members\": " + members + "]";
                if (!now.equals(last)) {
                    emit("epoch", now);
                    last = now;
                }
                Thread.sleep(50);
            }
        }
    }
}
